DROP TABLE IF EXISTS orchestrator_audit;
DROP TABLE IF EXISTS orchestrator_jobs;
