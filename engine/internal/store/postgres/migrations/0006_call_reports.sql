-- dcc-flow PostgreSQL schema: what a queued tool call reports while it runs (docs/operations/cluster.md,
-- "The tool-call queue", Progress and log lines). The engine that holds a call's claim writes a
-- row at most every 200 ms while the tool reports (the latest progress, the lines logged since
-- the previous row, at most 100, and how many lines it dropped), numbered by seq from 1 per
-- call, and always one before the call's outcome; the orchestrator reads the rows past the last
-- seq it read and feeds them to the run's step as a local call's reports. progress is a
-- StepProgress as JSON (NULL: unchanged since the previous row); lines a JSON array of LogLine.
-- Rows go with their call's row (ON DELETE CASCADE: the queue's housekeeping), and an hour
-- after they were written (the orchestrator read them within milliseconds; this bounds what a
-- call that logs for days keeps in the table).
CREATE TABLE tool_call_reports (
    call_id    BIGINT NOT NULL REFERENCES tool_calls (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    progress   TEXT,
    lines      TEXT NOT NULL DEFAULT '[]',
    dropped    INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (call_id, seq)
);
CREATE INDEX tool_call_reports_created ON tool_call_reports (created_at);
