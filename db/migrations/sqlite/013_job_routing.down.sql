ALTER TABLE workers DROP COLUMN warm_model;
ALTER TABLE orchestrator_jobs DROP COLUMN model_id;
ALTER TABLE orchestrator_jobs DROP COLUMN pool_id;
