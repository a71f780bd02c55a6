-- The SQLite mirror of mysql/018_approvals.up.sql (whose comment says what each table and
-- column holds).

CREATE TABLE approval_policies (
    name              TEXT    NOT NULL PRIMARY KEY,
    job_type          TEXT    NOT NULL DEFAULT '',
    agent             TEXT    NOT NULL DEFAULT '',
    min_gpus          INTEGER NOT NULL DEFAULT 0,
    min_gpu_memory_mb INTEGER NOT NULL DEFAULT 0,
    two_key           INTEGER NOT NULL DEFAULT 0,
    ttl_ms            INTEGER NOT NULL,
    on_expiry         TEXT    NOT NULL,
    updated_by        TEXT    NOT NULL DEFAULT '',
    updated_at        INTEGER NOT NULL
) STRICT;

CREATE TABLE approval_requests (
    job_id     TEXT    NOT NULL PRIMARY KEY,
    agent      TEXT    NOT NULL,
    policy     TEXT    NOT NULL,
    required   INTEGER NOT NULL,
    status     TEXT    NOT NULL,
    on_expiry  TEXT    NOT NULL,
    expires_at INTEGER NULL,
    created_at INTEGER NOT NULL,
    decided_at INTEGER NULL
) STRICT;
CREATE INDEX idx_approval_requests_status ON approval_requests (status, expires_at);

CREATE TABLE approval_decisions (
    job_id     TEXT    NOT NULL,
    approver   TEXT    NOT NULL,
    decision   TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    decided_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, approver)
) STRICT;
