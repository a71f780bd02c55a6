-- Jobs routed to a pool or a model (submit's pool_id and model_id; engine/schedule.go).
--
-- orchestrator_jobs.pool_id: the pool whose workers alone may run the job; '' for any.
-- orchestrator_jobs.model_id: the model a pool that runs the job must serve; '' for any.
-- The scheduler places such a job on a node where a live worker of such a pool runs, and
-- publishes it to that pool's stream of the node (placed_node is then "<node>@<pool>",
-- store.Target), which only that pool's workers there read: placed_node widens to hold a
-- node id (128) and a pool id (100).
--
-- workers.warm_model: the model the worker ran its pool's preload command for before it
-- registered (worker.preload); '' when it ran none. The scheduler prefers the nodes of warm
-- workers for a job of that model.
--
-- Appended columns with defaults: MariaDB adds them without copying the tables.
ALTER TABLE orchestrator_jobs
    ADD COLUMN pool_id VARCHAR(128) NOT NULL DEFAULT '',
    ADD COLUMN model_id VARCHAR(128) NOT NULL DEFAULT '',
    MODIFY COLUMN placed_node VARCHAR(256) NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN warm_model VARCHAR(128) NOT NULL DEFAULT '';
