-- A run's own priority (store.Run.Priority, docs/guide/resources.md "Who goes first"): the
-- priority it was started with over its spec's (`dcc-flow run --priority`, submit(priority=),
-- MCP's workflows_run), kept so that a resume gives its steps waiting for resources that
-- priority again. NULL: the spec's (and every run stored before this column).
ALTER TABLE workflows ADD COLUMN priority INTEGER;
