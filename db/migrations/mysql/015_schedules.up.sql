-- Schedules (schedules/, docs/architecture.md "Schedules"): jobs created on a cron schedule by
-- the leader's firer. 014 and 016 are reserved for other changes.
--
-- schedules: one row per schedule.
--
--   schedule_id    the schedule's name (ident rule, at most 96 bytes, so that the job id of a
--                  fire, sch-<schedule_id>-<unix seconds>, fits the 128 of job_id)
--   agent          the agent its jobs run as (job.agent), kept apart for GET /schedules by an
--                  agent token, which sees only its own
--   cron           the schedule: 5 fields, 6 with seconds first, @every <duration>, @hourly, …
--   timezone       the IANA zone the cron fields are read in (UTC by default)
--   job            JSON object, the job template: type, agent, payload, resources, priority,
--                  max_attempts (what a submit names)
--   catch_up       what becomes of fire times missed by more than schedules.misfire_grace
--                  (no leader ran): skip, once (one job for them all) or all (up to
--                  catch_up_max, the latest)
--   max_concurrent the most jobs of the schedule unfinished at once (0: no limit)
--   on_overlap     what a fire does when max_concurrent are unfinished: skip, or queue (it
--                  waits, as a queued fire row, and its job is created when one ends)
--   require_previous_success
--                  1: a fire is skipped when the schedule's previous job did not end done, and
--                  waits (queue) or is skipped (skip) while that job is unfinished
--   paused         1: nothing fires (a manual trigger still does)
--   next_fire_at   the firer's cursor: the earliest fire time not handled yet; fire times
--                  before it are handled (fired, queued, skipped) exactly once
--   last_fire_at, last_job_id
--                  the latest fire that created a job (the "previous" fire of
--                  require_previous_success); NULL and '' before the first
--   created_by     the actor that created it; created_at, updated_at
--
-- schedule_fires: one row per fire time handled on its own, unique on (schedule_id,
-- fire_time): the leader writes it in the same transaction as the fire's job and audit rows,
-- fenced by its term, so a fire time can have one job at most, whatever fails over.
--
--   state          queued (waiting for a job of the schedule to end), running (its job was
--                  created and is not known to have ended), ended (job_status says how),
--                  skipped (reason says why)
--   job_id         the fire's job (queued: the id its job will have); '' for a skip of a fire
--                  whose job could not be built
--   job_status     the job's terminal status once the firer saw it end ('gone' when the job
--                  was deleted first); '' until then
--   reason         why it fired (due, catch_up, dequeued, trigger) or was skipped (overlap,
--                  queue_full, previous_running, previous_failed, invalid_job)
--   created_at     when the row was written; fired_at when its job was created (the lag of
--                  the fire is fired_at − fire_time)
--
-- Fire times dropped by catch_up have no row: each pass writes one schedule.skipped audit row
-- for them (reason missed or catch_up_max, with their count). Ended and skipped rows are
-- deleted after audit_retention, except each schedule's last fire.

CREATE TABLE schedules (
    schedule_id              VARCHAR(96)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent                    VARCHAR(128) NOT NULL,
    cron                     VARCHAR(255) NOT NULL,
    timezone                 VARCHAR(64)  NOT NULL,
    job                      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    catch_up                 VARCHAR(8)   NOT NULL,
    catch_up_max             INT          NOT NULL,
    max_concurrent           INT          NOT NULL DEFAULT 0,
    on_overlap               VARCHAR(8)   NOT NULL,
    require_previous_success TINYINT(1)   NOT NULL DEFAULT 0,
    paused                   TINYINT(1)   NOT NULL DEFAULT 0,
    next_fire_at             DATETIME(6)  NULL,
    last_fire_at             DATETIME(6)  NULL,
    last_job_id              VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    created_by               VARCHAR(160) NOT NULL DEFAULT '',
    created_at               DATETIME(6)  NOT NULL,
    updated_at               DATETIME(6)  NOT NULL,
    PRIMARY KEY (schedule_id),
    -- the firer: the schedules due, and the earliest next fire
    KEY idx_schedules_due (paused, next_fire_at),
    -- GET /schedules of an agent token
    KEY idx_schedules_agent (agent, schedule_id),
    CONSTRAINT chk_schedules_job_json CHECK (JSON_VALID(job)),
    CONSTRAINT chk_schedules_catch_up CHECK (catch_up IN ('skip', 'once', 'all') AND catch_up_max >= 1),
    CONSTRAINT chk_schedules_overlap CHECK (on_overlap IN ('skip', 'queue') AND max_concurrent >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE schedule_fires (
    schedule_id VARCHAR(96)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fire_time   DATETIME(6)  NOT NULL,
    state       VARCHAR(8)   NOT NULL,
    job_id      VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    job_status  VARCHAR(16)  NOT NULL DEFAULT '',
    reason      VARCHAR(32)  NOT NULL DEFAULT '',
    created_at  DATETIME(6)  NOT NULL,
    fired_at    DATETIME(6)  NULL,
    PRIMARY KEY (schedule_id, fire_time),
    -- the firer: the queued and running fires of a schedule, or of all
    KEY idx_schedule_fires_open (state, schedule_id),
    -- retention: ended and skipped fires by age
    KEY idx_schedule_fires_age (state, fire_time),
    CONSTRAINT chk_schedule_fires_state CHECK (state IN ('queued', 'running', 'ended', 'skipped'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
