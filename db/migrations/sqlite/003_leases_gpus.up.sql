-- Leases and GPU telemetry: the SQLite mirror of mysql/003_leases_gpus.up.sql (same columns,
-- same meaning; see that file for what each column holds). Times are INTEGER microseconds
-- since the Unix epoch, as in 001.

CREATE TABLE orchestrator_leases (
    token          TEXT    NOT NULL PRIMARY KEY,
    agent_name     TEXT    NOT NULL,
    job_id         TEXT    NULL,
    node_id        TEXT    NOT NULL,
    gpu_index      INTEGER NULL,
    mode           TEXT    NOT NULL CHECK (mode IN ('gpu', 'cpu')),
    memory_mb      INTEGER NOT NULL DEFAULT 0,
    exclusive      INTEGER NOT NULL DEFAULT 0,
    ttl_ms         INTEGER NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('active', 'released', 'expired')),
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    last_heartbeat INTEGER NOT NULL,
    ended_at       INTEGER NULL,
    metadata       TEXT    NULL CHECK (metadata IS NULL OR json_valid(metadata)),
    CHECK ((mode = 'gpu') = (gpu_index IS NOT NULL))
) STRICT;

-- placement: the active reservations of one node's GPUs
CREATE INDEX idx_leases_node_status ON orchestrator_leases (node_id, status, gpu_index);
-- the purger: active leases past their expiry
CREATE INDEX idx_leases_status_expires ON orchestrator_leases (status, expires_at);
CREATE INDEX idx_leases_agent_status ON orchestrator_leases (agent_name, status);
CREATE INDEX idx_leases_job ON orchestrator_leases (job_id);

CREATE TABLE gpu_devices (
    node_id         TEXT    NOT NULL,
    gpu_index       INTEGER NOT NULL,
    uuid            TEXT    NOT NULL DEFAULT '',
    name            TEXT    NOT NULL DEFAULT '',
    memory_total_mb INTEGER NOT NULL DEFAULT 0,
    memory_used_mb  INTEGER NOT NULL DEFAULT 0,
    utilization_pct INTEGER NOT NULL DEFAULT -1,
    temperature_c   INTEGER NOT NULL DEFAULT -1,
    power_watts     REAL    NOT NULL DEFAULT -1,
    lost            INTEGER NOT NULL DEFAULT 0,
    lost_reason     TEXT    NOT NULL DEFAULT '',
    source          TEXT    NOT NULL DEFAULT '',
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (node_id, gpu_index)
) STRICT;
