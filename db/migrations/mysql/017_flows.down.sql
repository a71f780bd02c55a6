-- Jobs still waiting or awaiting approval have no state to go back to: they are cancelled.
DROP TABLE workflow_steps;
DROP TABLE workflows;
DROP TABLE job_deps;
UPDATE orchestrator_jobs SET status = 'cancelled' WHERE status IN ('waiting', 'awaiting_approval');
ALTER TABLE orchestrator_jobs
    DROP COLUMN flow,
    MODIFY COLUMN status VARCHAR(16) NOT NULL;
