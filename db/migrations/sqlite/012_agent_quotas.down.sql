-- The SQLite mirror of mysql/012_agent_quotas.down.sql.
ALTER TABLE admission_policies DROP COLUMN max_gpus;
ALTER TABLE admission_policies DROP COLUMN max_gpu_memory_mb;
