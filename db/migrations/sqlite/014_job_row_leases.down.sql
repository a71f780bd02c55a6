CREATE INDEX idx_audit_ts ON orchestrator_audit (ts);
ALTER TABLE orchestrator_jobs DROP COLUMN lease_expires_at;
