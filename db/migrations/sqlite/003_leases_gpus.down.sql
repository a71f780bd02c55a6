DROP TABLE IF EXISTS gpu_devices;
DROP TABLE IF EXISTS orchestrator_leases;
