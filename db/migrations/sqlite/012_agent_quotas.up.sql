-- The SQLite mirror of mysql/012_agent_quotas.up.sql (whose comment says what the columns
-- mean). SQLite adds a column with a CHECK when its default passes the check.
ALTER TABLE admission_policies ADD COLUMN max_gpu_memory_mb INTEGER NOT NULL DEFAULT 0 CHECK (max_gpu_memory_mb >= 0);
ALTER TABLE admission_policies ADD COLUMN max_gpus INTEGER NOT NULL DEFAULT 0 CHECK (max_gpus >= 0);
