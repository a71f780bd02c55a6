-- Jobs and the audit trail: the SQLite mirror of mysql/001_jobs_audit.up.sql (same columns,
-- same indexes, same meaning), for the embedded single-node mode.
--
-- Later migrations, as with MariaDB: 004 adds idx_jobs_owner_pool, 006 drops idx_jobs_worker.
-- 007 changes nothing here: SQLite runs a CHECK on UPDATE only when a column it names changes,
-- so the payload's and result's json_valid checks cost one parse each and stay.
--
-- STRICT tables: SQLite checks every value against the column type instead of silently
-- storing whatever it is given, which is what the MariaDB schema guarantees too.
--
-- Times are INTEGER microseconds since the Unix epoch (UTC), the precision of DATETIME(6): they
-- compare and sort in time order, and the interval arithmetic of the MariaDB queries
-- (expires_at = now + INTERVAL ttl) stays arithmetic (now + ttl_ms * 1000). NULL is "absent".
-- In the sqlite3 shell: strftime('%Y-%m-%d %H:%M:%f', created_at / 1e6, 'unixepoch').
--
-- JSON columns (payload, result, details) are TEXT with a json_valid check: the bytes the
-- client sent are stored and returned unchanged, and garbage cannot get in. NULL means absent.
--
-- Text comparisons use SQLite's default BINARY collation: job ids, agents, types and statuses
-- match byte for byte (case-sensitive), and ORDER BY job_id is Go's string order, exactly as
-- with the ascii_bin / utf8mb4_bin columns of the MariaDB schema.

CREATE TABLE orchestrator_jobs (
    job_id        TEXT    NOT NULL PRIMARY KEY,
    type          TEXT    NOT NULL,
    agent         TEXT    NOT NULL,
    payload       TEXT    NULL CHECK (payload IS NULL OR json_valid(payload)),
    status        TEXT    NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL DEFAULT 1,
    available_at  INTEGER NOT NULL,
    enqueued      INTEGER NOT NULL DEFAULT 0,
    stream_id     TEXT    NOT NULL DEFAULT '',
    owner_pool    TEXT    NOT NULL DEFAULT '',
    worker_id     TEXT    NOT NULL DEFAULT '',
    lease_token   TEXT    NOT NULL DEFAULT '',
    gpu_memory_mb INTEGER NOT NULL DEFAULT 0,
    timeout_ms    INTEGER NOT NULL DEFAULT 0,
    result        TEXT    NULL CHECK (result IS NULL OR json_valid(result)),
    last_error    TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    started_at    INTEGER NULL,
    finished_at   INTEGER NULL
) STRICT;

-- the dispatcher: pending, not yet published, due
CREATE INDEX idx_jobs_dispatch ON orchestrator_jobs (status, enqueued, available_at);
-- GET /jobs keyset pagination, newest first
CREATE INDEX idx_jobs_created ON orchestrator_jobs (created_at, job_id);
CREATE INDEX idx_jobs_agent_status ON orchestrator_jobs (agent, status);
CREATE INDEX idx_jobs_type_status ON orchestrator_jobs (type, status);
CREATE INDEX idx_jobs_worker ON orchestrator_jobs (worker_id);

-- AUTOINCREMENT: ids are never reused, even after retention deleted the newest rows, so the
-- job event feed (which reads "id > last seen") never skips or repeats an event.
CREATE TABLE orchestrator_audit (
    id          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    ts          INTEGER NOT NULL,
    event_type  TEXT    NOT NULL,
    job_id      TEXT    NULL,
    lease_token TEXT    NOT NULL DEFAULT '',
    pool_id     TEXT    NOT NULL DEFAULT '',
    actor       TEXT    NOT NULL DEFAULT '',
    details     TEXT    NULL CHECK (details IS NULL OR json_valid(details))
) STRICT;

-- the job event feed: one job's rows in id order
CREATE INDEX idx_audit_job ON orchestrator_audit (job_id, id);
-- retention deletes by age
CREATE INDEX idx_audit_ts ON orchestrator_audit (ts);
