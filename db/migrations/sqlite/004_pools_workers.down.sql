DROP INDEX IF EXISTS idx_jobs_owner_pool;
DROP TABLE IF EXISTS workers;
DROP TABLE IF EXISTS worker_pools;
