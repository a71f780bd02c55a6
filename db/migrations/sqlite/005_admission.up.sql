-- Admission control: the SQLite mirror of mysql/005_admission.up.sql (same columns, same
-- meaning; see that file for what each column holds). Times are INTEGER microseconds since the
-- Unix epoch, as in 001.

CREATE TABLE admission_policies (
    agent        TEXT    NOT NULL PRIMARY KEY,
    rate_per_sec REAL    NOT NULL CHECK (rate_per_sec > 0),
    burst        INTEGER NOT NULL CHECK (burst >= 1),
    max_pending  INTEGER NOT NULL DEFAULT 0 CHECK (max_pending >= 0),
    enabled      INTEGER NOT NULL DEFAULT 1,
    updated_at   INTEGER NOT NULL
) STRICT;
