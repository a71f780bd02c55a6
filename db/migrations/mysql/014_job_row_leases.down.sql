-- Back to 64-byte tokens: the leases held in job rows (lj_ tokens, up to 164 bytes) cannot be
-- kept. Their audit rows lose the token; a job still claimed or running with one loses its
-- lease, so its worker's result is refused as stale and the lease purger of the older version
-- cannot see it: stop the workers before migrating down.
UPDATE orchestrator_audit SET lease_token = '' WHERE lease_token LIKE 'lj\_%';
UPDATE orchestrator_jobs SET lease_token = '' WHERE lease_token LIKE 'lj\_%';
ALTER TABLE orchestrator_audit
    MODIFY COLUMN lease_token VARCHAR(64) NOT NULL DEFAULT '',
    ADD CONSTRAINT chk_audit_details_json CHECK (details IS NULL OR JSON_VALID(details)),
    ADD KEY idx_audit_ts (ts);
ALTER TABLE orchestrator_jobs
    DROP COLUMN lease_expires_at,
    MODIFY COLUMN lease_token VARCHAR(64) NOT NULL DEFAULT '';
