-- Where a job may run (submit's "constraints"; store.Constraints, engine/schedule.go).
--
-- orchestrator_jobs.constraints: JSON {"node_selector": {label: value}, "allow_nodes": [...],
-- "deny_nodes": [...], "max_per_node": N}, or NULL for a job with none (most). The scheduler
-- places a GPU job only on a node that passes them; submit refuses a job that no registered
-- node could ever pass (422 unsatisfiable). Like the payload, it is the application's JSON,
-- written once at the insert: no CHECK (007 says what one costs on every UPDATE of the row).
-- An appended NULL column: MariaDB adds it without copying the table.
ALTER TABLE orchestrator_jobs ADD COLUMN constraints LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
