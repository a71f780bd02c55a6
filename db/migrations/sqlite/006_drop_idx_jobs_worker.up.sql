-- The SQLite mirror of mysql/006_drop_idx_jobs_worker.up.sql: the index served no query.
DROP INDEX IF EXISTS idx_jobs_worker;
