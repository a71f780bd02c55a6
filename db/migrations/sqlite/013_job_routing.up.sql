-- The SQLite mirror of mysql/013_job_routing.up.sql (whose comment says what the columns mean).
ALTER TABLE orchestrator_jobs ADD COLUMN pool_id TEXT NOT NULL DEFAULT '';
ALTER TABLE orchestrator_jobs ADD COLUMN model_id TEXT NOT NULL DEFAULT '';
ALTER TABLE workers ADD COLUMN warm_model TEXT NOT NULL DEFAULT '';
