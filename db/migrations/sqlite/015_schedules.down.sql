-- The SQLite mirror of mysql/015_schedules.down.sql.
DROP TABLE IF EXISTS schedule_fires;
DROP TABLE IF EXISTS schedules;
