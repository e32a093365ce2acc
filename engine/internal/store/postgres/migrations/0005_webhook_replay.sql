-- dcc-flow PostgreSQL schema: the replay guard of timestamped webhooks shared by the engines of
-- the database (store.ReplayFinder, docs/operations/cluster.md, "Schedules"). replay_key is the accepted
-- X-Dcc-Flow-Signature of a webhook fire with signature: timestamped, "<t>.<v1 hex digest>";
-- NULL for every other fire, so the partial index holds only the timestamped webhook fires. A
-- nullable column without a default is added without rewriting the table.
ALTER TABLE schedule_fires ADD COLUMN replay_key TEXT;
CREATE INDEX schedule_fires_replay ON schedule_fires (schedule_id, replay_key) WHERE replay_key IS NOT NULL;
