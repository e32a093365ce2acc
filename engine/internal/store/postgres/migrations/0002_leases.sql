-- dcc-flow PostgreSQL schema, version 2: many engines on one database (docs/operations/cluster.md).
--
-- engines: one row per read-write engine attached to the database, written when it opens and
-- heartbeated every lease_secs/3; deleted when it closes. tools and lanes are JSON arrays.
CREATE TABLE engines (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL DEFAULT '',
    pid          BIGINT NOT NULL DEFAULT 0,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_secs   DOUBLE PRECISION NOT NULL DEFAULT 15,
    tools        TEXT NOT NULL DEFAULT '[]',
    lanes        TEXT NOT NULL DEFAULT '[]'
);

-- A run is orchestrated by the engine in owner while lease_until (server time) is in the
-- future; that engine renews it with its heartbeat. NULL lease_until: no engine holds it (a
-- finished run, a run released by its engine, a run written before version 2).
ALTER TABLE workflows ADD COLUMN owner TEXT;
ALTER TABLE workflows ADD COLUMN lease_until TIMESTAMPTZ;
CREATE INDEX workflows_owner ON workflows (owner) WHERE owner IS NOT NULL;
CREATE INDEX workflows_unfinished ON workflows (lease_until) WHERE status IN ('pending', 'running', 'waiting', 'paused');

-- A cron or interval fire is claimed by inserting (schedule_id, slot) before its run starts:
-- of the engines that have the schedule, the one whose insert succeeds fires it.
CREATE TABLE schedule_slots (
    schedule_id TEXT NOT NULL,
    slot        BIGINT NOT NULL,
    engine_id   TEXT NOT NULL DEFAULT '',
    claimed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, slot)
);

-- A control request for a run that no live lease holds is answered by one engine: the one that
-- wrote its id here first.
ALTER TABLE control_requests ADD COLUMN claimed_by TEXT;
