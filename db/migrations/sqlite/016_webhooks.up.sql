-- Webhooks: the SQLite mirror of mysql/016_webhooks.up.sql (same tables, columns and indexes;
-- that file says what each holds). Times are INTEGER microseconds since the Unix epoch, JSON
-- is TEXT checked by json_valid, as in 001.

ALTER TABLE orchestrator_jobs ADD COLUMN callback_url TEXT NOT NULL DEFAULT '';

CREATE TABLE webhook_subscriptions (
    id                   TEXT    NOT NULL PRIMARY KEY,
    url                  TEXT    NOT NULL,
    events               TEXT    NOT NULL CHECK (json_valid(events)),
    filter_type          TEXT    NOT NULL DEFAULT '',
    filter_agent         TEXT    NOT NULL DEFAULT '',
    secret               TEXT    NOT NULL,
    status               TEXT    NOT NULL,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    retry_at             INTEGER NULL,
    disabled_reason      TEXT    NOT NULL DEFAULT '',
    disabled_at          INTEGER NULL,
    created_by           TEXT    NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
) STRICT;

-- AUTOINCREMENT: delivery ids are never reused, so a page cursor never points at another row.
CREATE TABLE webhook_deliveries (
    id               INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    subscription_id  TEXT    NOT NULL DEFAULT '',
    url              TEXT    NOT NULL,
    agent            TEXT    NOT NULL DEFAULT '',
    event_id         INTEGER NOT NULL,
    event_type       TEXT    NOT NULL,
    event_at         INTEGER NOT NULL,
    job_id           TEXT    NOT NULL DEFAULT '',
    idempotency_key  TEXT    NOT NULL,
    body             TEXT    NOT NULL CHECK (json_valid(body)),
    status           TEXT    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    last_status_code INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER NULL
) STRICT;

CREATE UNIQUE INDEX uk_webhook_deliveries_key ON webhook_deliveries (idempotency_key);
-- the sender: pending deliveries that are due
CREATE INDEX idx_webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
-- GET /webhooks/{id}/deliveries, newest first, and the deletion of a subscription's
CREATE INDEX idx_webhook_deliveries_sub ON webhook_deliveries (subscription_id, id);
-- retention of finished deliveries
CREATE INDEX idx_webhook_deliveries_finished ON webhook_deliveries (finished_at);

CREATE TABLE webhook_attempts (
    delivery_id INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    status_code INTEGER NOT NULL DEFAULT 0,
    error       TEXT    NOT NULL DEFAULT '',
    started_at  INTEGER NOT NULL,
    duration_us INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (delivery_id, attempt)
) STRICT;

CREATE TABLE webhook_cursor (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    last_id    INTEGER NOT NULL,
    gaps       TEXT    NOT NULL CHECK (json_valid(gaps)),
    version    INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NULL
) STRICT;

INSERT INTO webhook_cursor (id, last_id, gaps) SELECT 1, COALESCE(MAX(id), 0), '[]' FROM orchestrator_audit;
