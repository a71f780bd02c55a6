ALTER TABLE orchestrator_jobs DROP COLUMN constraints;
