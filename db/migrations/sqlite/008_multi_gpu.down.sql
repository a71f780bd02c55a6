-- The SQLite mirror of mysql/008_multi_gpu.down.sql.
ALTER TABLE orchestrator_leases DROP COLUMN gpu_indexes;
ALTER TABLE orchestrator_jobs DROP COLUMN priority;
ALTER TABLE orchestrator_jobs DROP COLUMN waiting_reason;
ALTER TABLE orchestrator_jobs DROP COLUMN gpu_exclusive;
ALTER TABLE orchestrator_jobs DROP COLUMN gpus;
