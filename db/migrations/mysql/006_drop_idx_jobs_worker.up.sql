-- idx_jobs_worker (worker_id) served no query: every lookup of a job by its worker goes through
-- the primary key (claim, start, completion, cancel lists) or owner_pool (pool eviction). It
-- was still written on every claim, retry and rescue, in the hot path's most expensive
-- statement (docs/performance-history.md, "2026-11-25: one call per worker round").
DROP INDEX idx_jobs_worker ON orchestrator_jobs;
