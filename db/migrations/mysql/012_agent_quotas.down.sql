-- Agents lose their GPU quotas: only the token bucket and max_pending remain.
ALTER TABLE admission_policies
    DROP CONSTRAINT chk_admission_max_gpus,
    DROP CONSTRAINT chk_admission_max_gpu_memory_mb,
    DROP COLUMN max_gpus,
    DROP COLUMN max_gpu_memory_mb;
