-- Leases and GPU telemetry: nothing runs without a lease, and a GPU lease is placed by the
-- node's telemetry.
--
-- orchestrator_leases: one row per lease, kept after it ends (released or expired) as the record
-- of who held which resource when; retention deletes old ended rows.
--
--   token          128 random bits (hex, "lt_" prefix): the capability that renews and releases
--                  the lease; ascii_bin, compared byte for byte
--   agent_name     the agent the resource is held for (a job lease: the job's agent)
--   job_id         the job of a worker-held lease; NULL for a lease an agent took directly
--   node_id        the node of the resource
--   gpu_index      the GPU of a gpu lease; NULL for a cpu lease
--   mode           gpu | cpu
--   memory_mb      GPU memory reserved (gpu), as asked for (cpu: informational)
--   exclusive      1: the lease holds the whole GPU, nothing else is placed on it
--   ttl_ms         the lease's time to live: a heartbeat moves expires_at to now + ttl
--   status         active | released | expired (leases/state.go holds the transitions)
--   created_at, expires_at, last_heartbeat, ended_at (when it was released or expired)
--   metadata       JSON: worker_id, pool_id, attempt of a job lease; anything an agent sent
--
-- gpu_devices: the latest telemetry of every (node, GPU), written by the node's reporters (the
-- workers in their renew calls, each orchestrator for its own node). updated_at is the time the
-- orchestrator received the snapshot (its clock, not the node's), which freshness is judged by.
-- A lost GPU (fell off the bus, needs a reset) keeps its row with lost = 1 so operators see it;
-- placement never picks it.

CREATE TABLE orchestrator_leases (
    token          VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_name     VARCHAR(128) NOT NULL,
    job_id         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL,
    node_id        VARCHAR(128) NOT NULL,
    gpu_index      INT          NULL,
    mode           VARCHAR(8)   NOT NULL,
    memory_mb      BIGINT       NOT NULL DEFAULT 0,
    exclusive      TINYINT(1)   NOT NULL DEFAULT 0,
    ttl_ms         BIGINT       NOT NULL,
    status         VARCHAR(16)  NOT NULL,
    created_at     DATETIME(6)  NOT NULL,
    expires_at     DATETIME(6)  NOT NULL,
    last_heartbeat DATETIME(6)  NOT NULL,
    ended_at       DATETIME(6)  NULL,
    metadata       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (token),
    -- placement: the active reservations of one node's GPUs
    KEY idx_leases_node_status (node_id, status, gpu_index),
    -- the purger: active leases past their expiry
    KEY idx_leases_status_expires (status, expires_at),
    -- GET /leases?agent=&status=
    KEY idx_leases_agent_status (agent_name, status),
    KEY idx_leases_job (job_id),
    CONSTRAINT chk_leases_mode CHECK (mode IN ('gpu', 'cpu')),
    CONSTRAINT chk_leases_status CHECK (status IN ('active', 'released', 'expired')),
    CONSTRAINT chk_leases_gpu CHECK ((mode = 'gpu') = (gpu_index IS NOT NULL)),
    CONSTRAINT chk_leases_metadata_json CHECK (metadata IS NULL OR JSON_VALID(metadata))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE gpu_devices (
    node_id         VARCHAR(128) NOT NULL,
    gpu_index       INT          NOT NULL,
    uuid            VARCHAR(128) NOT NULL DEFAULT '',
    name            VARCHAR(128) NOT NULL DEFAULT '',
    memory_total_mb BIGINT       NOT NULL DEFAULT 0,
    memory_used_mb  BIGINT       NOT NULL DEFAULT 0,
    utilization_pct INT          NOT NULL DEFAULT -1,
    temperature_c   INT          NOT NULL DEFAULT -1,
    power_watts     DOUBLE       NOT NULL DEFAULT -1,
    lost            TINYINT(1)   NOT NULL DEFAULT 0,
    lost_reason     VARCHAR(255) NOT NULL DEFAULT '',
    source          VARCHAR(16)  NOT NULL DEFAULT '',
    updated_at      DATETIME(6)  NOT NULL,
    PRIMARY KEY (node_id, gpu_index)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
