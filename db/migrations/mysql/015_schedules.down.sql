DROP TABLE IF EXISTS schedule_fires;
DROP TABLE IF EXISTS schedules;
