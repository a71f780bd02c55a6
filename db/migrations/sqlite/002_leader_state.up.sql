-- Leadership, fenced by a term: the SQLite mirror of mysql/002_leader_state.up.sql.
--
-- In the embedded mode the leader is the process holding the file lock on the data directory
-- (leader.LocalElector); this row only numbers the acquisitions, exactly as with MariaDB, so
-- that leader-only code is the same in both modes.
--
--   term        acquisitions so far; 0 until the first leader
--   leader_id   the instance id of the latest leader (hostname-pid by default)
--   acquired_at when that leader acquired its term (microseconds since the epoch, see 001)
--   renewed_at  that leader's last successful check

CREATE TABLE leader_state (
    id          INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    term        INTEGER NOT NULL,
    leader_id   TEXT    NULL,
    acquired_at INTEGER NULL,
    renewed_at  INTEGER NULL
) STRICT;

INSERT INTO leader_state (id, term) VALUES (1, 0);
