-- The SQLite mirror of mysql/011_job_constraints.up.sql (whose comment says what the column means).
ALTER TABLE orchestrator_jobs ADD COLUMN constraints TEXT NULL;
