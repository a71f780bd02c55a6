-- Jobs and the audit trail. All DATETIME(6) columns hold UTC (the driver forces loc=UTC).
--
-- orchestrator_jobs is the truth about every job: its state, attempts, payload and result, the
-- outbox flag (enqueued, stream_id: published or not) and the worker and lease of its current
-- attempt. orchestrator_audit holds one row per transition, written in the transition's own
-- transaction; its auto-increment id is the order of events.
--
-- Later migrations change these tables: 004 adds idx_jobs_owner_pool (owner_pool, status) for
-- a pool's eviction; 006 drops idx_jobs_worker, which served no query; 007 drops the JSON_VALID
-- checks of payload and result, which MariaDB ran on every UPDATE of a job row (the API's
-- decoder checks both before they are written). The audit details' check stays.
--
-- JSON columns (payload, result, details) are LONGTEXT utf8mb4_bin with a JSON_VALID check, the
-- same shape MariaDB's own JSON alias produces, spelled out so that:
--   * the bytes the client sent are stored and returned unchanged (no normalisation, unlike
--     MySQL's binary JSON type), so a repeated submit compares equal byte for byte;
--   * operators can still use JSON_EXTRACT & co. in ad-hoc queries, and garbage cannot get in;
--   * LONGTEXT has no practical size cap (payloads of a few MiB are bounded by
--     max_allowed_packet and the API's max_payload_bytes, not by the column).
-- NULL means "absent" (a nil json.RawMessage).
--
-- job_id is ascii_bin: ids are case-sensitive and compared byte for byte, which also makes
-- the keyset order (created_at, job_id) the same as Go's string order. Every other text column
-- is utf8mb4_bin too (the table default): filters on agent, type, status and worker_id match
-- exactly, as they do in Go and in the SQLite driver, never case- or accent-insensitively.

CREATE TABLE orchestrator_jobs (
    job_id        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    type          VARCHAR(64)  NOT NULL,
    agent         VARCHAR(128) NOT NULL,
    payload       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    status        VARCHAR(16)  NOT NULL,
    attempts      INT          NOT NULL DEFAULT 0,
    max_attempts  INT          NOT NULL DEFAULT 1,
    available_at  DATETIME(6)  NOT NULL,
    enqueued      TINYINT(1)   NOT NULL DEFAULT 0,
    stream_id     VARCHAR(64)  NOT NULL DEFAULT '',
    owner_pool    VARCHAR(128) NOT NULL DEFAULT '',
    worker_id     VARCHAR(128) NOT NULL DEFAULT '',
    lease_token   VARCHAR(64)  NOT NULL DEFAULT '',
    gpu_memory_mb INT          NOT NULL DEFAULT 0,
    timeout_ms    BIGINT       NOT NULL DEFAULT 0,
    result        LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    last_error    TEXT         NOT NULL DEFAULT '',
    created_at    DATETIME(6)  NOT NULL,
    updated_at    DATETIME(6)  NOT NULL,
    started_at    DATETIME(6)  NULL,
    finished_at   DATETIME(6)  NULL,
    PRIMARY KEY (job_id),
    -- the dispatcher: pending, not yet published, due
    KEY idx_jobs_dispatch (status, enqueued, available_at),
    -- GET /jobs keyset pagination, newest first
    KEY idx_jobs_created (created_at, job_id),
    KEY idx_jobs_agent_status (agent, status),
    KEY idx_jobs_type_status (type, status),
    KEY idx_jobs_worker (worker_id),
    CONSTRAINT chk_jobs_payload_json CHECK (payload IS NULL OR JSON_VALID(payload)),
    CONSTRAINT chk_jobs_result_json CHECK (result IS NULL OR JSON_VALID(result))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE orchestrator_audit (
    id          BIGINT       NOT NULL AUTO_INCREMENT,
    ts          DATETIME(6)  NOT NULL,
    event_type  VARCHAR(64)  NOT NULL,
    job_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL,
    lease_token VARCHAR(64)  NOT NULL DEFAULT '',
    pool_id     VARCHAR(128) NOT NULL DEFAULT '',
    actor       VARCHAR(160) NOT NULL DEFAULT '',
    details     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (id),
    -- the job event feed: one job's rows in id order
    KEY idx_audit_job (job_id, id),
    -- retention deletes by age
    KEY idx_audit_ts (ts),
    CONSTRAINT chk_audit_details_json CHECK (details IS NULL OR JSON_VALID(details))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
