DROP TABLE IF EXISTS leader_state;
