-- Sub-workflows (docs/reference/spec.md, "workflow"): the run a `kind: workflow` step started records its
-- parent run and the parent's step instance key; NULL for a run started on its own (and for
-- every run written before this migration).
ALTER TABLE workflows ADD COLUMN parent_run_id TEXT;
ALTER TABLE workflows ADD COLUMN parent_step_key TEXT;
CREATE INDEX workflows_parent ON workflows(parent_run_id) WHERE parent_run_id IS NOT NULL;
