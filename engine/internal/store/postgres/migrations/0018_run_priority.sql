-- A run's own priority (store.Run.Priority, docs/guide/resources.md "Who goes first"), as
-- SQLite's migration 0016: the priority it was started with over its spec's, kept so that a
-- resume, or another engine's takeover, gives its steps waiting for resources that priority
-- again. NULL: the spec's (and every run stored before this column). Added without a table
-- rewrite (no default).
ALTER TABLE workflows ADD COLUMN priority INTEGER;
