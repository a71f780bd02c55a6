-- The node the scheduler placed a pending GPU job on (scheduler/, engine/schedule.go).
--
-- orchestrator_jobs.placed_node: while a pending job is placed, the node whose GPUs its lease
-- (lease_token, active, held for the job with no worker yet) reserves; its entry is in that
-- node's stream of the type, where only that node's workers read. '' when the job is not
-- placed. Every write of lease_token writes it too (store/internal/sqlgen JobSet), so a claim,
-- a retry, a cancellation or an expired placement clears it.
ALTER TABLE orchestrator_jobs
    ADD COLUMN placed_node VARCHAR(128) NOT NULL DEFAULT '';
