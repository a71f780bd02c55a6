-- Per-agent GPU quotas: the most GPU memory and the most GPUs an agent may hold at once, in
-- its active gpu leases (its running jobs' leases, the scheduler's reservations for its placed
-- jobs and the leases it took itself). Set with the other limits of its admission policy (PUT
-- /control/admission); the scheduler and the lease grants enforce them (engine/quota.go,
-- leases/quota.go).
--
--   max_gpu_memory_mb  the most memory, summed over the agent's active gpu leases of
--                      memory_mb × the lease's GPUs; 0: no limit
--   max_gpus           the most GPUs, summed over those leases (two leases of one GPU count
--                      2); 0: no limit
--
-- The '*' row's quota applies to each agent without a row of its own, not to all of them
-- together. Adding columns with defaults changes only metadata on MariaDB 10.11.
ALTER TABLE admission_policies
    ADD COLUMN max_gpu_memory_mb BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN max_gpus INT NOT NULL DEFAULT 0,
    ADD CONSTRAINT chk_admission_max_gpu_memory_mb CHECK (max_gpu_memory_mb >= 0),
    ADD CONSTRAINT chk_admission_max_gpus CHECK (max_gpus >= 0);
