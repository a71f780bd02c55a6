-- Admission control: one policy per agent with a limit of its own (the token bucket's rate and
-- burst, a cap on pending jobs), read by every instance's admission refresher.
--
--   agent         the agent's name, or '*': the row that replaces the configured default policy
--                 at run time (the policy of every agent without a row of its own)
--   rate_per_sec  sustained rate of the agent's token bucket (submits and lease requests per
--                 second; fractions allowed, e.g. 0.5 is one every two seconds)
--   burst         requests admitted at once by a bucket that was idle long enough to be full
--   max_pending   cap on the agent's non-terminal jobs (pending, claimed, running, failed);
--                 0: no cap
--   enabled       0 exempts the agent from its bucket and max_pending (the cluster-wide gates,
--                 GPU pressure and queue depth, still apply)
--   updated_at    the last change (PUT /control/admission)
--
-- Every orchestrator instance reads the whole table once per admission.refresh_interval: it
-- holds a few hundred rows at most.

CREATE TABLE admission_policies (
    agent        VARCHAR(128) NOT NULL,
    rate_per_sec DOUBLE       NOT NULL,
    burst        INT          NOT NULL,
    max_pending  INT          NOT NULL DEFAULT 0,
    enabled      TINYINT(1)   NOT NULL DEFAULT 1,
    updated_at   DATETIME(6)  NOT NULL,
    PRIMARY KEY (agent),
    CONSTRAINT chk_admission_rate CHECK (rate_per_sec > 0),
    CONSTRAINT chk_admission_burst CHECK (burst >= 1),
    CONSTRAINT chk_admission_max_pending CHECK (max_pending >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
