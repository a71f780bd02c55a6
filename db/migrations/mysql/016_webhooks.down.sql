DROP TABLE webhook_cursor;
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_subscriptions;
ALTER TABLE orchestrator_jobs DROP COLUMN callback_url;
