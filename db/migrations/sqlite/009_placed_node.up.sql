-- The SQLite mirror of mysql/009_placed_node.up.sql (whose comment says what the column means).
ALTER TABLE orchestrator_jobs ADD COLUMN placed_node TEXT NOT NULL DEFAULT '';
