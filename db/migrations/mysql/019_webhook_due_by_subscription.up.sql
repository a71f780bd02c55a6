-- The webhook sender reads the due deliveries of each endpoint that may be sent to (the
-- callbacks, subscription_id '', and each active subscription not backing off) through this
-- index, instead of walking every pending delivery in due order and filtering: the pending
-- deliveries of an endpoint that is backing off, disabled or deleted were read again on every
-- pass (store/internal/sqlgen/webhook_deliveries.go, WebhookDeliveriesDue).
-- idx_webhook_deliveries_due (status, next_attempt_at) stays for the pending count.
ALTER TABLE webhook_deliveries ADD KEY idx_webhook_deliveries_sub_due (subscription_id, status, next_attempt_at);
