-- The node registry (nodes/, docs/architecture.md "Nodes"): until now a node existed only as
-- the node_id of workers and gpu_devices rows, so nothing could say where a job may go beyond
-- "where a worker of its type runs", and nothing could take a node out of placement.
--
-- nodes: one row per node that registered a worker or reported GPU telemetry; never deleted by
-- the orchestrator (a node that left shows as offline).
--
--   node_id        the node's name, as workers and telemetry name it (workers.node_id)
--   labels         JSON object of string labels: the ones the node's workers were configured
--                  with (node_labels) merged with the ones the orchestrator derives from the
--                  node's telemetry (gpu.product, gpu.memory_mb, gpu.count, gpu.driver, …;
--                  nodelabels/ holds the rules); the telemetry's win for gpu.* keys
--   cordoned       1: the scheduler places no new job on the node; work already placed or
--                  running there goes on
--   cordon_reason, cordoned_by
--                  why and by whom (the admin's actor) the node was last cordoned or uncordoned
--   cordoned_at    when it was cordoned; NULL while it is not
--   first_seen     when the node was first recorded
--   last_seen      the latest registration or telemetry record of the node (the orchestrator's
--                  clock); refreshed at most every few seconds, not on every telemetry report

CREATE TABLE nodes (
    node_id       VARCHAR(128) NOT NULL,
    labels        LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    cordoned      TINYINT(1)   NOT NULL DEFAULT 0,
    cordon_reason VARCHAR(512) NOT NULL DEFAULT '',
    cordoned_by   VARCHAR(128) NOT NULL DEFAULT '',
    cordoned_at   DATETIME(6)  NULL,
    first_seen    DATETIME(6)  NOT NULL,
    last_seen     DATETIME(6)  NOT NULL,
    PRIMARY KEY (node_id),
    CONSTRAINT chk_nodes_labels_json CHECK (JSON_VALID(labels))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
