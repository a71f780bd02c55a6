-- Webhooks (docs/architecture.md, "Webhooks"): subscriptions to job and cluster events, the
-- per-job callback URL, and the durable outbox their deliveries go out from. 014 and 015 are
-- kept for other work; golang-migrate applies the versions it finds in order, gaps and all.
--
-- orchestrator_jobs.callback_url: where the job's terminal event (done, dead_letter,
-- cancelled) is POSTed, signed with its agent's callback secret; '' for none. ASCII: the API
-- takes only URLs in their encoded form.
--
-- webhook_subscriptions: one row per endpoint an admin subscribed.
--
--   id                    "wh_" + 24 hex digits, chosen at creation
--   url                   the http(s) endpoint, checked at creation and at every dial (no
--                         loopback, private, link-local or unspecified address unless
--                         webhooks.allow_private)
--   events                JSON array of event names (job.done, job.failed, …)
--   filter_type,
--   filter_agent          only events of jobs of this type / agent; '' for any
--   secret                the HMAC-SHA256 key of the endpoint's signatures, shown once at
--                         creation; kept because every delivery is signed with it
--   status                active or disabled (by an admin, or after
--                         webhooks.max_consecutive_failures failures in a row)
--   consecutive_failures  failed attempts since the last success
--   retry_at              the endpoint is backing off: none of its deliveries is sent before
--                         this (one probe then); NULL when it is not
--   disabled_reason, disabled_at
--                         why and when it was last disabled
--   created_by            the admin's actor
--
-- webhook_deliveries: the outbox, one row per (event, endpoint): at least once, each retry
-- with the same idempotency key and body.
--
--   id                    the delivery's number (keyset paging)
--   subscription_id       the subscription; '' for a job's callback
--   url                   where it goes (the subscription's, or the job's callback_url)
--   agent                 the job's agent ('' for an event without a job): a callback is
--                         signed with that agent's callback secret
--   event_id              the orchestrator_audit id the event comes from
--   event_type            the webhook event name (job.done, schedule.skipped, …)
--   event_at              when the event happened (the audit row's ts): the delivery lag
--   job_id                the event's job, '' for none
--   idempotency_key       "<event_id>-<subscription id or 'callback'>": the Idempotency-Key
--                         header, the same on every attempt; unique, so that an event is never
--                         queued twice for one endpoint
--   body                  the JSON body sent, fixed at creation
--   status                pending, delivered, or failed (given up after webhooks.max_attempts)
--   attempts              attempts made so far
--   next_attempt_at       not sent before (capped exponential backoff with jitter)
--   last_status_code      the HTTP status of the last attempt (0: none, or no answer)
--   last_error            what went wrong with the last attempt ('' after a success)
--   finished_at           when it was delivered or given up; NULL while pending
--
-- webhook_attempts: one row per attempt of a delivery (GET /webhooks/{id}/deliveries).
--
-- webhook_cursor: one row, the leader's position in orchestrator_audit. Every audit id up to
-- last_id has been read, except the ids in gaps (a JSON array of {"id", "first_seen"}): ids
-- that were missing when a higher one was read, whose transaction may still commit (an id is
-- assigned at insert, committed later, or never). They are read again until
-- webhooks.gap_window has passed. The row is written, under a compare-and-set on version, in
-- the fenced transaction that inserts the deliveries it read, so no event is queued twice or
-- skipped. It starts at the audit trail's end: events before this migration are not sent.

ALTER TABLE orchestrator_jobs ADD COLUMN callback_url VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '';

CREATE TABLE webhook_subscriptions (
    id                   VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    url                  VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    events               LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    filter_type          VARCHAR(64)   NOT NULL DEFAULT '',
    filter_agent         VARCHAR(128)  NOT NULL DEFAULT '',
    secret               VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status               VARCHAR(16)   NOT NULL,
    consecutive_failures INT           NOT NULL DEFAULT 0,
    retry_at             DATETIME(6)   NULL,
    disabled_reason      VARCHAR(512)  NOT NULL DEFAULT '',
    disabled_at          DATETIME(6)   NULL,
    created_by           VARCHAR(160)  NOT NULL DEFAULT '',
    created_at           DATETIME(6)   NOT NULL,
    updated_at           DATETIME(6)   NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT chk_webhook_events_json CHECK (JSON_VALID(events))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE webhook_deliveries (
    id               BIGINT        NOT NULL AUTO_INCREMENT,
    subscription_id  VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    url              VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    agent            VARCHAR(128)  NOT NULL DEFAULT '',
    event_id         BIGINT        NOT NULL,
    event_type       VARCHAR(64)   NOT NULL,
    event_at         DATETIME(6)   NOT NULL,
    job_id           VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    idempotency_key  VARCHAR(200)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    body             LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    status           VARCHAR(16)   NOT NULL,
    attempts         INT           NOT NULL DEFAULT 0,
    next_attempt_at  DATETIME(6)   NOT NULL,
    last_status_code INT           NOT NULL DEFAULT 0,
    last_error       VARCHAR(1024) NOT NULL DEFAULT '',
    created_at       DATETIME(6)   NOT NULL,
    updated_at       DATETIME(6)   NOT NULL,
    finished_at      DATETIME(6)   NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_webhook_deliveries_key (idempotency_key),
    -- the sender: pending deliveries that are due
    KEY idx_webhook_deliveries_due (status, next_attempt_at),
    -- GET /webhooks/{id}/deliveries, newest first, and the deletion of a subscription's
    KEY idx_webhook_deliveries_sub (subscription_id, id),
    -- retention of finished deliveries
    KEY idx_webhook_deliveries_finished (finished_at),
    CONSTRAINT chk_webhook_body_json CHECK (JSON_VALID(body))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE webhook_attempts (
    delivery_id BIGINT        NOT NULL,
    attempt     INT           NOT NULL,
    status_code INT           NOT NULL DEFAULT 0,
    error       VARCHAR(1024) NOT NULL DEFAULT '',
    started_at  DATETIME(6)   NOT NULL,
    duration_us BIGINT        NOT NULL DEFAULT 0,
    PRIMARY KEY (delivery_id, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE webhook_cursor (
    id         TINYINT     NOT NULL,
    last_id    BIGINT      NOT NULL,
    gaps       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    version    BIGINT      NOT NULL DEFAULT 0,
    updated_at DATETIME(6) NULL,
    PRIMARY KEY (id),
    CONSTRAINT chk_webhook_cursor_single_row CHECK (id = 1),
    CONSTRAINT chk_webhook_cursor_gaps_json CHECK (JSON_VALID(gaps))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO webhook_cursor (id, last_id, gaps) SELECT 1, COALESCE(MAX(id), 0), '[]' FROM orchestrator_audit;
