DROP INDEX idx_jobs_owner_pool ON orchestrator_jobs;
DROP TABLE IF EXISTS workers;
DROP TABLE IF EXISTS worker_pools;
