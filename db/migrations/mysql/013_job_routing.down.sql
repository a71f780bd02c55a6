ALTER TABLE workers DROP COLUMN warm_model;
ALTER TABLE orchestrator_jobs DROP COLUMN pool_id, DROP COLUMN model_id,
    MODIFY COLUMN placed_node VARCHAR(128) NOT NULL DEFAULT '';
