-- A leaner job path (docs/architecture.md, "Leases"; docs/performance.md).
--
-- orchestrator_jobs.lease_expires_at: the expiry of the lease a job without a GPU holds in its
-- own row. Such a job's lease reserves nothing, so it needs no row of its own: its token
-- (lease_token, "lj_…", naming the job) and expiry live in the job row, are renewed there by
-- the worker's heartbeats, and the lease purger rescues the claimed and running jobs whose
-- expiry passed. NULL for a job that never held one; stale (and ignored) once lease_token is
-- cleared. GPU leases, placements and agents' direct leases stay in orchestrator_leases.
-- lease_token widens for the job id such a token carries (leases.NewJobToken).
--
-- orchestrator_audit loses idx_audit_ts and its JSON check: retention deletes the oldest rows
-- in id order (ids follow time; store/mysql AuditDeleteBefore), and every details value is
-- written by the orchestrator's own json.Marshal. Both cost every audit row an index entry or a
-- parse, three or four rows per job.
--
-- Appended column, widened VARCHARs that keep their length bytes, dropped index and check:
-- MariaDB 10.11 changes these in place without copying the tables.
ALTER TABLE orchestrator_jobs
    ADD COLUMN lease_expires_at DATETIME(6) NULL,
    MODIFY COLUMN lease_token VARCHAR(192) NOT NULL DEFAULT '';
ALTER TABLE orchestrator_audit
    MODIFY COLUMN lease_token VARCHAR(192) NOT NULL DEFAULT '',
    DROP CONSTRAINT chk_audit_details_json,
    DROP INDEX idx_audit_ts;
