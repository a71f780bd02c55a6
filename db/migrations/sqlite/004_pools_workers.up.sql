-- Worker pools and the worker registry: the SQLite mirror of mysql/004_pools_workers.up.sql
-- (same columns, same meaning; see that file for what each column holds). Times are INTEGER
-- microseconds since the Unix epoch, JSON is TEXT checked by json_valid, as in 001.

CREATE TABLE worker_pools (
    pool_id           TEXT    NOT NULL PRIMARY KEY,
    agent_name        TEXT    NOT NULL DEFAULT '',
    model_id          TEXT    NOT NULL DEFAULT '',
    adapter           TEXT    NOT NULL DEFAULT '',
    variant           TEXT    NOT NULL DEFAULT '',
    job_types         TEXT    NOT NULL CHECK (json_valid(job_types)),
    desired_workers   INTEGER NOT NULL DEFAULT 0,
    spawned_workers   INTEGER NOT NULL DEFAULT 0,
    status            TEXT    NOT NULL CHECK (status IN ('starting', 'running', 'draining', 'stopped', 'evicted')),
    status_reason     TEXT    NOT NULL DEFAULT '',
    status_changed_at INTEGER NOT NULL,
    hold_seconds      INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    started_at        INTEGER NOT NULL,
    last_heartbeat    INTEGER NULL,
    last_activity_at  INTEGER NULL,
    metadata          TEXT    NULL CHECK (metadata IS NULL OR json_valid(metadata)),
    CHECK (desired_workers >= 0 AND spawned_workers >= 0 AND hold_seconds >= 0)
) STRICT;

CREATE INDEX idx_pools_status ON worker_pools (status);

CREATE TABLE workers (
    worker_id      TEXT    NOT NULL PRIMARY KEY,
    pool_id        TEXT    NOT NULL DEFAULT '',
    node_id        TEXT    NOT NULL DEFAULT '',
    hostname       TEXT    NOT NULL DEFAULT '',
    pid            INTEGER NOT NULL DEFAULT 0,
    job_types      TEXT    NOT NULL CHECK (json_valid(job_types)),
    concurrency    INTEGER NOT NULL DEFAULT 0,
    status         TEXT    NOT NULL CHECK (status IN ('idle', 'executing', 'draining', 'offline')),
    instruction    TEXT    NOT NULL DEFAULT '' CHECK (instruction IN ('', 'drain', 'stop')),
    in_flight      INTEGER NOT NULL DEFAULT 0,
    jobs_claimed   INTEGER NOT NULL DEFAULT 0,
    telemetry      TEXT    NULL CHECK (telemetry IS NULL OR json_valid(telemetry)),
    registered_at  INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL,
    last_active_at INTEGER NULL
) STRICT;

-- GET /workers/pools/{id} and the reconciler: the workers of one pool
CREATE INDEX idx_workers_pool ON workers (pool_id, status);
-- the leader: workers whose heartbeats stopped
CREATE INDEX idx_workers_status_heartbeat ON workers (status, last_heartbeat);

-- The eviction of a pool rescues the jobs its workers hold: claimed or running jobs by owner.
CREATE INDEX idx_jobs_owner_pool ON orchestrator_jobs (owner_pool, status);
