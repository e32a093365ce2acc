-- dcc-flow PostgreSQL schema: the slots of scarce resources (store.ResourceSlots,
-- docs/guide/resources.md), held across every engine of the database under each engine's
-- lease. resource_slots has one row per holder (an attempt of a step) and resource, with the
-- engine that took it and the limit it took it under (engines may declare different ones): a row counts while that engine's heartbeat is at most its lease old
-- (heartbeat_at + lease_secs >= now()); the next acquire of the resource deletes the rows of an
-- engine past that, so that they never count again. An acquire takes a transaction-level
-- advisory lock per resource name it asks for (the two-key form: class 1684235110, 'dccf', and
-- hashtext of the name; in name order, so that acquires never deadlock), which makes the count
-- and the insert of one resource a critical section across the engines without writing a row
-- lock. Two names of one hash share a lock: they wait for each other, nothing more.
CREATE TABLE resource_slots (
    holder      TEXT NOT NULL,
    resource    TEXT NOT NULL,
    amount      INTEGER NOT NULL,
    taken_limit INTEGER NOT NULL DEFAULT 0,
    engine_id   TEXT NOT NULL,
    run_id      TEXT NOT NULL DEFAULT '',
    label       TEXT NOT NULL DEFAULT '',
    acquired_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (holder, resource)
);
CREATE INDEX resource_slots_resource ON resource_slots (resource);

-- resource_acquire takes the amounts of holder p_holder for engine p_engine, all or none, in one
-- round trip: 1 when taken (or held already), 0 when a resource has fewer free units than asked
-- under the taker's limit, -1 when the engine's own heartbeat is past its lease (it cannot take
-- a slot). p_names must be sorted and without duplicates; p_amounts and p_limits match them.
CREATE FUNCTION resource_acquire(p_engine TEXT, p_holder TEXT, p_names TEXT[], p_amounts INTEGER[],
    p_limits INTEGER[], p_run TEXT, p_label TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    i INTEGER;
    used BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM engines WHERE id = p_engine AND heartbeat_at + make_interval(secs => lease_secs) >= now()) THEN
        RETURN -1;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        PERFORM pg_advisory_xact_lock(1684235110, hashtext(p_names[i]));
    END LOOP;
    IF EXISTS (SELECT 1 FROM resource_slots WHERE holder = p_holder) THEN
        RETURN 1;
    END IF;
    DELETE FROM resource_slots s WHERE s.resource = ANY(p_names) AND NOT EXISTS (
        SELECT 1 FROM engines e WHERE e.id = s.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now());
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        SELECT coalesce(sum(amount), 0) INTO used FROM resource_slots WHERE resource = p_names[i];
        IF used + p_amounts[i] > p_limits[i] THEN
            RETURN 0;
        END IF;
    END LOOP;
    INSERT INTO resource_slots (holder, resource, amount, taken_limit, engine_id, run_id, label)
        SELECT p_holder, u.n, u.a, u.l, p_engine, p_run, p_label FROM unnest(p_names, p_amounts, p_limits) AS u(n, a, l);
    RETURN 1;
END $$;
