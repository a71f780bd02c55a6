-- Worker pools and the worker registry, and the index of orchestrator_jobs by owner pool that a
-- pool's eviction rescues by.
--
-- worker_pools: one row per named pool, kept across orchestrator restarts; the leader's
-- reconciler makes the live workers match it.
--
--   pool_id            the pool's name, chosen by the operator ("mistral-warm"); ascii_bin
--   agent_name         the agent the pool serves (its heartbeats keep the pool warm)
--   model_id, adapter, variant
--                      what the workers keep loaded (told to them in the preload event)
--   job_types          JSON array of the job types the workers serve
--   desired_workers    how many workers the pool should have
--   spawned_workers    how many are live (registered and heartbeating, or started by the local
--                      provisioner and not yet registered), as the reconciler last counted
--   status             starting | running | draining | stopped | evicted (pools/state.go holds
--                      the transitions)
--   status_reason      why the last transition happened ("hold expired", "drained by admin")
--   status_changed_at  when it happened: drain and evict grace periods count from it
--   hold_seconds       an idle pool (no job claimed, no agent heartbeat) is drained after this
--                      long; 0 keeps it forever
--   started_at         when the pool (re)started
--   last_heartbeat     the agent's last POST /workers/pools/{id}/heartbeat (NULL: never)
--   last_activity_at   the last time one of its workers reported a claimed or running job
--   metadata           any JSON object the creator attached
--
-- workers: one row per registered worker process, deleted when it deregisters (a clean exit);
-- a worker silent for pools.offline_heartbeats intervals is marked offline by the leader, and
-- forgotten an hour later.
--
--   worker_id          the worker's id (its consumer name in every group)
--   pool_id            its pool ('' for a worker that belongs to none)
--   node_id, hostname, pid
--                      where it runs
--   job_types          JSON array of the job types it serves; concurrency: its slots
--   status             idle | executing | draining | offline
--   instruction        '' | drain | stop: what its next heartbeat answer tells it to do
--   in_flight          jobs running at its last heartbeat; jobs_claimed: its running total
--   telemetry          JSON: the node's GPU snapshot of its last heartbeat (NULL: none)
--   registered_at, last_heartbeat, last_active_at (its last heartbeat reporting work)

CREATE TABLE worker_pools (
    pool_id           VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent_name        VARCHAR(128) NOT NULL DEFAULT '',
    model_id          VARCHAR(255) NOT NULL DEFAULT '',
    adapter           VARCHAR(255) NOT NULL DEFAULT '',
    variant           VARCHAR(128) NOT NULL DEFAULT '',
    job_types         LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    desired_workers   INT          NOT NULL DEFAULT 0,
    spawned_workers   INT          NOT NULL DEFAULT 0,
    status            VARCHAR(16)  NOT NULL,
    status_reason     VARCHAR(255) NOT NULL DEFAULT '',
    status_changed_at DATETIME(6)  NOT NULL,
    hold_seconds      INT          NOT NULL DEFAULT 0,
    created_at        DATETIME(6)  NOT NULL,
    updated_at        DATETIME(6)  NOT NULL,
    started_at        DATETIME(6)  NOT NULL,
    last_heartbeat    DATETIME(6)  NULL,
    last_activity_at  DATETIME(6)  NULL,
    metadata          LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (pool_id),
    KEY idx_pools_status (status),
    CONSTRAINT chk_pools_status CHECK (status IN ('starting', 'running', 'draining', 'stopped', 'evicted')),
    CONSTRAINT chk_pools_desired CHECK (desired_workers >= 0 AND spawned_workers >= 0 AND hold_seconds >= 0),
    CONSTRAINT chk_pools_types_json CHECK (JSON_VALID(job_types)),
    CONSTRAINT chk_pools_metadata_json CHECK (metadata IS NULL OR JSON_VALID(metadata))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE workers (
    worker_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    pool_id        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    node_id        VARCHAR(128) NOT NULL DEFAULT '',
    hostname       VARCHAR(255) NOT NULL DEFAULT '',
    pid            INT          NOT NULL DEFAULT 0,
    job_types      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    concurrency    INT          NOT NULL DEFAULT 0,
    status         VARCHAR(16)  NOT NULL,
    instruction    VARCHAR(16)  NOT NULL DEFAULT '',
    in_flight      INT          NOT NULL DEFAULT 0,
    jobs_claimed   BIGINT       NOT NULL DEFAULT 0,
    telemetry      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    registered_at  DATETIME(6)  NOT NULL,
    last_heartbeat DATETIME(6)  NOT NULL,
    last_active_at DATETIME(6)  NULL,
    PRIMARY KEY (worker_id),
    -- GET /workers/pools/{id} and the reconciler: the workers of one pool
    KEY idx_workers_pool (pool_id, status),
    -- the leader: workers whose heartbeats stopped
    KEY idx_workers_status_heartbeat (status, last_heartbeat),
    CONSTRAINT chk_workers_status CHECK (status IN ('idle', 'executing', 'draining', 'offline')),
    CONSTRAINT chk_workers_instruction CHECK (instruction IN ('', 'drain', 'stop')),
    CONSTRAINT chk_workers_types_json CHECK (JSON_VALID(job_types)),
    CONSTRAINT chk_workers_telemetry_json CHECK (telemetry IS NULL OR JSON_VALID(telemetry))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The eviction of a pool rescues the jobs its workers hold: claimed or running jobs by owner.
CREATE INDEX idx_jobs_owner_pool ON orchestrator_jobs (owner_pool, status);
