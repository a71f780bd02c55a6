-- The SQLite mirror of mysql/019_webhook_due_by_subscription.up.sql.
CREATE INDEX idx_webhook_deliveries_sub_due ON webhook_deliveries (subscription_id, status, next_attempt_at);
