-- dcc-flow PostgreSQL schema: calls of worker pools and remotes through the tool-call queue
-- (docs/operations/cluster.md, "Pools and remotes on other engines"). engines.remotes is a JSON array of
-- the remotes (worker pools, MCP servers) an engine has configured; tool_calls.remote is the
-- remote a queued call must run on ('' = a host tool, claimed by tool), and tool_calls.worker
-- names what ran it (the engine id, then "/" and the pool worker when there is one); logs are the
-- output lines the call wrote (a JSON array of {stream, text, …}), logs_dropped those not kept.
ALTER TABLE engines ADD COLUMN remotes TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tool_calls ADD COLUMN remote TEXT NOT NULL DEFAULT '';
ALTER TABLE tool_calls ADD COLUMN worker TEXT NOT NULL DEFAULT '';
ALTER TABLE tool_calls ADD COLUMN logs TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tool_calls ADD COLUMN logs_dropped INTEGER NOT NULL DEFAULT 0;
CREATE INDEX tool_calls_queued_remote ON tool_calls (remote, id) WHERE status = 'queued' AND remote <> '';
