-- The SQLite mirror of mysql/007_drop_chk_jobs_json.up.sql. No schema change is needed here:
-- SQLite runs a CHECK on UPDATE only when a column it names changes, and a job's payload and
-- result are each written once. So the checks cost one parse each, and the version stays
-- aligned with MariaDB's.
SELECT 1;
