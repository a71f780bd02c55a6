-- Approvals (docs/architecture.md, "Workflows, fan-out and approvals"; engine/approvals*.go):
-- risky work held until a person approves it.
--
-- approval_policies: the policies set at run time (PUT /approvals/policies; the configuration's
-- approvals.policies come on top, and a row of the same name wins). A policy matches a submit
-- when every criterion it sets holds: its job_type, its agent, the job's GPUs at least min_gpus,
-- the job's GPU memory (per GPU times GPUs) at least min_gpu_memory_mb ('' and 0: any). A
-- matching submit is written awaiting_approval with a request; two_key asks two distinct
-- approvers; ttl_ms is how long the request waits before on_expiry (reject: the job is
-- cancelled; escalate: the request waits on for an admin). Every instance reads the table
-- whole every approvals.refresh_interval: no submit reads it.
--
-- approval_requests: one row per job held for approval: its policy, how many approvals it
-- needs (required), its status (waiting, escalated, approved, rejected, expired), when it
-- expires (NULL once decided or escalated) and what then. idx_approval_requests_status serves
-- GET /approvals and the leader's expirer (status = waiting AND expires_at <= now).
--
-- approval_decisions: one row per (job, approver): the same approver twice is the primary key
-- taken, which is how a two-key request refuses one person's second approval.

CREATE TABLE approval_policies (
    name              VARCHAR(64)  NOT NULL,
    job_type          VARCHAR(64)  NOT NULL DEFAULT '',
    agent             VARCHAR(128) NOT NULL DEFAULT '',
    min_gpus          INT          NOT NULL DEFAULT 0,
    min_gpu_memory_mb BIGINT       NOT NULL DEFAULT 0,
    two_key           TINYINT(1)   NOT NULL DEFAULT 0,
    ttl_ms            BIGINT       NOT NULL,
    on_expiry         VARCHAR(16)  NOT NULL,
    updated_by        VARCHAR(160) NOT NULL DEFAULT '',
    updated_at        DATETIME(6)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE approval_requests (
    job_id     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent      VARCHAR(128) NOT NULL,
    policy     VARCHAR(64)  NOT NULL,
    required   INT          NOT NULL,
    status     VARCHAR(16)  NOT NULL,
    on_expiry  VARCHAR(16)  NOT NULL,
    expires_at DATETIME(6)  NULL,
    created_at DATETIME(6)  NOT NULL,
    decided_at DATETIME(6)  NULL,
    PRIMARY KEY (job_id),
    KEY idx_approval_requests_status (status, expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE approval_decisions (
    job_id     VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    approver   VARCHAR(160)  NOT NULL,
    decision   VARCHAR(16)   NOT NULL,
    reason     VARCHAR(1024) NOT NULL DEFAULT '',
    decided_at DATETIME(6)   NOT NULL,
    PRIMARY KEY (job_id, approver)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
