-- dcc-flow PostgreSQL schema: a queued call carries the W3C traceparent of its call span in the
-- orchestrating engine's trace (docs/guide/tracing.md, docs/operations/cluster.md "The tool-call
-- queue"), so that the engine that claims it hands it to the tool and the tool's own spans join
-- the run's trace. '' when the orchestrating engine does not trace (or predates this column).
-- Added without a table rewrite (a constant default).
ALTER TABLE tool_calls ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
