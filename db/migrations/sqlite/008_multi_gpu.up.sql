-- The SQLite mirror of mysql/008_multi_gpu.up.sql (whose comment says what the columns mean).
ALTER TABLE orchestrator_jobs ADD COLUMN gpus INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orchestrator_jobs ADD COLUMN gpu_exclusive INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orchestrator_jobs ADD COLUMN waiting_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE orchestrator_jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orchestrator_leases ADD COLUMN gpu_indexes TEXT NOT NULL DEFAULT '';
