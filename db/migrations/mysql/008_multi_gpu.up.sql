-- Jobs that need several GPUs of one node, or a whole GPU, and leases that hold several GPUs.
--
-- orchestrator_jobs.gpus: how many GPUs of one node the job needs (0 for a CPU job; a GPU job
-- of a row written before this migration needs one, and reads as 0 here: the engine counts a
-- job with gpu_memory_mb > 0 and gpus = 0 as one GPU). gpu_memory_mb is per GPU.
-- orchestrator_jobs.gpu_exclusive: the job wants its GPUs to itself (nothing else placed on
-- them while its lease is active).
--
-- orchestrator_jobs.priority: 0..9, higher first among the GPU jobs a worker waits to place
-- (its type's job_types.<type>.priority unless the submit names one).
--
-- orchestrator_jobs.waiting_reason: why a pending job was last refused a place ("no_capacity:
-- no GPU of node ... has 30000 MB free ..."), '' when none; cleared when the job is claimed.
--
-- orchestrator_leases.gpu_indexes: the GPUs of a lease beyond gpu_index, comma-separated
-- ("3,5"); '' for a lease of one GPU, or none. memory_mb is reserved on each of them. The
-- placement sums read it (store/internal/sqlgen/gpus.go).
--
-- Adding columns with defaults changes only metadata on MariaDB 10.11 (instant ADD COLUMN).
ALTER TABLE orchestrator_jobs
    ADD COLUMN gpus INT NOT NULL DEFAULT 0,
    ADD COLUMN gpu_exclusive TINYINT(1) NOT NULL DEFAULT 0,
    ADD COLUMN waiting_reason VARCHAR(255) NOT NULL DEFAULT '',
    ADD COLUMN priority TINYINT NOT NULL DEFAULT 0;
ALTER TABLE orchestrator_leases
    ADD COLUMN gpu_indexes VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '';
