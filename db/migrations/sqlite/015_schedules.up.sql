-- Schedules: the SQLite mirror of mysql/015_schedules.up.sql (same columns, same meaning; see
-- that file for what each column holds). Times are INTEGER microseconds since the Unix epoch,
-- JSON is TEXT checked by json_valid, as in 001.

CREATE TABLE schedules (
    schedule_id              TEXT    NOT NULL PRIMARY KEY,
    agent                    TEXT    NOT NULL,
    cron                     TEXT    NOT NULL,
    timezone                 TEXT    NOT NULL,
    job                      TEXT    NOT NULL CHECK (json_valid(job)),
    catch_up                 TEXT    NOT NULL CHECK (catch_up IN ('skip', 'once', 'all')),
    catch_up_max             INTEGER NOT NULL CHECK (catch_up_max >= 1),
    max_concurrent           INTEGER NOT NULL DEFAULT 0 CHECK (max_concurrent >= 0),
    on_overlap               TEXT    NOT NULL CHECK (on_overlap IN ('skip', 'queue')),
    require_previous_success INTEGER NOT NULL DEFAULT 0,
    paused                   INTEGER NOT NULL DEFAULT 0,
    next_fire_at             INTEGER NULL,
    last_fire_at             INTEGER NULL,
    last_job_id              TEXT    NOT NULL DEFAULT '',
    created_by               TEXT    NOT NULL DEFAULT '',
    created_at               INTEGER NOT NULL,
    updated_at               INTEGER NOT NULL
) STRICT;

CREATE INDEX idx_schedules_due ON schedules (paused, next_fire_at);
CREATE INDEX idx_schedules_agent ON schedules (agent, schedule_id);

CREATE TABLE schedule_fires (
    schedule_id TEXT    NOT NULL,
    fire_time   INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'ended', 'skipped')),
    job_id      TEXT    NOT NULL DEFAULT '',
    job_status  TEXT    NOT NULL DEFAULT '',
    reason      TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    fired_at    INTEGER NULL,
    PRIMARY KEY (schedule_id, fire_time)
) STRICT;

CREATE INDEX idx_schedule_fires_open ON schedule_fires (state, schedule_id);
CREATE INDEX idx_schedule_fires_age ON schedule_fires (state, fire_time);
