-- The SQLite mirror of mysql/007_drop_chk_jobs_payload_json.up.sql. No schema change is
-- needed here: SQLite runs a CHECK on UPDATE only when a column it names changes, and a job's
-- payload is written only by its INSERT. So the check costs nothing after the insert, and
-- the version stays aligned with MariaDB's.
SELECT 1;
