-- Leadership: one row holding the current leadership term, so that leader-only work is fenced.
--
-- The leader is whoever holds the MariaDB GET_LOCK; this row only numbers the acquisitions.
-- Every acquisition increments term (right after GET_LOCK succeeded), and every leader-only
-- write checks, inside its own transaction and under a shared lock on this row, that its term
-- is still the current one: a deposed leader that wakes up late is refused (fenced).
--
--   term        acquisitions so far; 0 until the first leader
--   leader_id   the instance id of the latest leader (hostname-pid by default)
--   acquired_at when that leader acquired its term
--   renewed_at  that leader's last successful check that it still holds the lock (/status
--               shows how stale it is)

CREATE TABLE leader_state (
    id          TINYINT      NOT NULL,
    term        BIGINT       NOT NULL,
    leader_id   VARCHAR(190) NULL,
    acquired_at DATETIME(6)  NULL,
    renewed_at  DATETIME(6)  NULL,
    PRIMARY KEY (id),
    CONSTRAINT chk_leader_state_single_row CHECK (id = 1)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO leader_state (id, term) VALUES (1, 0);
