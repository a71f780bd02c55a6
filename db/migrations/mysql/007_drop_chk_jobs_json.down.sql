-- Adding the constraints back checks every existing row: the table is copied.
ALTER TABLE orchestrator_jobs
    ADD CONSTRAINT chk_jobs_payload_json CHECK (payload IS NULL OR JSON_VALID(payload)),
    ADD CONSTRAINT chk_jobs_result_json CHECK (result IS NULL OR JSON_VALID(result));
