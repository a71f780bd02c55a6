-- The node registry: the SQLite mirror of mysql/010_nodes.up.sql (same columns, same meaning;
-- see that file for what each column holds). Times are INTEGER microseconds since the Unix
-- epoch, JSON is TEXT checked by json_valid, as in 001.

CREATE TABLE nodes (
    node_id       TEXT    NOT NULL PRIMARY KEY,
    labels        TEXT    NOT NULL CHECK (json_valid(labels)),
    cordoned      INTEGER NOT NULL DEFAULT 0,
    cordon_reason TEXT    NOT NULL DEFAULT '',
    cordoned_by   TEXT    NOT NULL DEFAULT '',
    cordoned_at   INTEGER NULL,
    first_seen    INTEGER NOT NULL,
    last_seen     INTEGER NOT NULL
) STRICT;
