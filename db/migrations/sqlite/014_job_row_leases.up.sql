-- The SQLite mirror of mysql/014_job_row_leases.up.sql (whose comment says what changes and
-- why). TEXT has no length to widen, and the audit details' check stays: dropping it would
-- copy the table, and SQLite's json_valid is cheap next to the rest of an insert.
ALTER TABLE orchestrator_jobs ADD COLUMN lease_expires_at INTEGER NULL;
DROP INDEX idx_audit_ts;
