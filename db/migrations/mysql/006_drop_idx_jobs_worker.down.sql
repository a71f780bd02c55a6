CREATE INDEX idx_jobs_worker ON orchestrator_jobs (worker_id);
