DROP TABLE IF EXISTS admission_policies;
