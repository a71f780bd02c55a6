-- Multi-GPU leases become leases of their first GPU: the others are no longer reserved.
ALTER TABLE orchestrator_leases DROP COLUMN gpu_indexes;
ALTER TABLE orchestrator_jobs DROP COLUMN priority, DROP COLUMN waiting_reason, DROP COLUMN gpu_exclusive, DROP COLUMN gpus;
