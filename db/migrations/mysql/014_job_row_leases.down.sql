ALTER TABLE orchestrator_audit
    MODIFY COLUMN lease_token VARCHAR(64) NOT NULL DEFAULT '',
    ADD CONSTRAINT chk_audit_details_json CHECK (details IS NULL OR JSON_VALID(details)),
    ADD KEY idx_audit_ts (ts);
ALTER TABLE orchestrator_jobs
    DROP COLUMN lease_expires_at,
    MODIFY COLUMN lease_token VARCHAR(64) NOT NULL DEFAULT '';
