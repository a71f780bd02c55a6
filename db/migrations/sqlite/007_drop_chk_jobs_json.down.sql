-- The SQLite mirror of mysql/007_drop_chk_jobs_json.down.sql: nothing was changed.
SELECT 1;
