-- Adding the constraint back checks every existing row: the table is copied.
ALTER TABLE orchestrator_jobs ADD CONSTRAINT chk_jobs_payload_json CHECK (payload IS NULL OR JSON_VALID(payload));
