DROP TABLE workflow_steps;
DROP TABLE workflows;
DROP TABLE job_deps;
UPDATE orchestrator_jobs SET status = 'cancelled' WHERE status IN ('waiting', 'awaiting_approval');
ALTER TABLE orchestrator_jobs DROP COLUMN flow;
