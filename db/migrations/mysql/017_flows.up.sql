-- Jobs that wait for other jobs, workflows and fan-outs (docs/architecture.md, "Workflows,
-- fan-out and approvals"; engine/flows*.go).
--
-- orchestrator_jobs.status widens to VARCHAR(24) for the new states waiting and
-- awaiting_approval (17 characters). Both lengths keep one length byte (at most 96 bytes in
-- utf8mb4), so MariaDB 10.11 changes the column in place, indexes included
-- (ALGORITHM=INSTANT succeeds on it; not forced here, so a server that cannot still copies).
--
-- orchestrator_jobs.flow: bits that say what the job takes part in, so that the hot path of
-- every other job pays nothing for it (store.JobFlow): 1 it has parents (job_deps rows with
-- its job_id: a claim hands it their results), 2 jobs wait for it (its end wakes the
-- resolver), 4 it is a fan-out parent (never runs: it ends when its children have), 8 it runs
-- although a parent failed (on_parent_failure: run) or, for a fan-out parent, waits for every
-- child (strategy: continue), 16 it waits for an approval (018). 0 for a plain job. An
-- appended column with a default: added in place.
--
-- job_deps: one row per (waiting job, job it waits for). A job that depends_on others, and a
-- fan-out parent, whose rows name its children (label: the child's node); a workflow step's
-- rows name the steps it needs (label: the parent's step name). The resolver reads a waiting
-- job's rows; idx_job_deps_parent finds a parent's dependents.
--
-- workflows: one row per workflow (POST /workflows): its agent, status (running, done,
-- failed, cancelled) and the request as accepted (spec, JSON). Its audit rows carry
-- job_id 'wf/<workflow_id>' ('/' is in no job id), so that (job_id, id) serves them too.
-- workflow_steps: one row per step, with the job that runs it (the fan-out parent for a step
-- that fans out), the steps it needs (JSON array) and its phase (0 without phases).

ALTER TABLE orchestrator_jobs
    MODIFY COLUMN status VARCHAR(24) NOT NULL,
    ADD COLUMN flow TINYINT NOT NULL DEFAULT 0;

CREATE TABLE job_deps (
    job_id    VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    parent_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    label     VARCHAR(128) NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, parent_id),
    KEY idx_job_deps_parent (parent_id, job_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE workflows (
    workflow_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent       VARCHAR(128) NOT NULL,
    status      VARCHAR(16)  NOT NULL,
    spec        LONGTEXT     NOT NULL,
    created_by  VARCHAR(160) NOT NULL DEFAULT '',
    created_at  DATETIME(6)  NOT NULL,
    updated_at  DATETIME(6)  NOT NULL,
    finished_at DATETIME(6)  NULL,
    PRIMARY KEY (workflow_id),
    -- the resolver's running workflows; GET /workflows by status
    KEY idx_workflows_status (status, created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE workflow_steps (
    workflow_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    step        VARCHAR(64)  NOT NULL,
    job_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    needs       LONGTEXT     NOT NULL,
    phase       INT          NOT NULL DEFAULT 0,
    position    INT          NOT NULL,
    PRIMARY KEY (workflow_id, step)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
