ALTER TABLE orchestrator_jobs DROP COLUMN placed_node;
