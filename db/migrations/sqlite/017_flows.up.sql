-- The SQLite mirror of mysql/017_flows.up.sql (whose comment says what each table and column
-- holds). TEXT has no length to widen: the new states fit the status column as it is.

ALTER TABLE orchestrator_jobs ADD COLUMN flow INTEGER NOT NULL DEFAULT 0;

CREATE TABLE job_deps (
    job_id    TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    label     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, parent_id)
) STRICT;
CREATE INDEX idx_job_deps_parent ON job_deps (parent_id, job_id);

CREATE TABLE workflows (
    workflow_id TEXT    NOT NULL PRIMARY KEY,
    agent       TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    spec        TEXT    NOT NULL CHECK (json_valid(spec)),
    created_by  TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    finished_at INTEGER NULL
) STRICT;
CREATE INDEX idx_workflows_status ON workflows (status, created_at);

CREATE TABLE workflow_steps (
    workflow_id TEXT    NOT NULL,
    step        TEXT    NOT NULL,
    job_id      TEXT    NOT NULL,
    needs       TEXT    NOT NULL CHECK (json_valid(needs)),
    phase       INTEGER NOT NULL DEFAULT 0,
    position    INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, step)
) STRICT;
