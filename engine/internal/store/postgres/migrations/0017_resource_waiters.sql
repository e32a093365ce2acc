-- dcc-flow PostgreSQL schema: one wait queue of scarce resources across every engine of the
-- database (store.ResourceQueue, docs/guide/resources.md "Who goes first"). resource_waiters has
-- one row per waiting holder (an attempt of a step) with everything the order needs: its engine,
-- the amounts it asks for, the limits it is taken under, the caps its engine's probes put on
-- that engine's own holders, its priority and how fast it ages (aging_ms: one point per that
-- long waited; 0 none), its fair-share key, when it came (enqueued_at, the database's clock) and
-- its place of arrival (seq: first come, first served). A row counts while its engine's
-- heartbeat is at most its lease old; a dispatch deletes the others.
-- resource_fair_share keeps, per fair-share key, the number of the grant that last served it
-- (from the sequence resource_served): at the same round-robin rank the key served longest ago
-- goes first. Keys without a waiter are forgotten once the table is large (a key back later
-- counts as never served, as in an engine's own queue).
--
-- The order is engine/internal/resources's (Order, Pick), in SQL: a higher effective priority
-- (priority + one point per aging interval waited) first; then the rank among the waiters of
-- its key and effective priority; then the key served longest ago (never served first); then
-- seq. Granted in that order while amounts fit; a waiter that does not fit holds back every
-- resource it asks for from the waiters after it.
CREATE TABLE resource_waiters (
    holder      TEXT PRIMARY KEY,
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    engine_id   TEXT NOT NULL,
    names       TEXT[] NOT NULL,
    amounts     INTEGER[] NOT NULL,
    limits      INTEGER[] NOT NULL,
    caps        INTEGER[] NOT NULL,
    priority    INTEGER NOT NULL,
    aging_ms    BIGINT NOT NULL,
    fair_key    TEXT NOT NULL,
    run_id      TEXT NOT NULL DEFAULT '',
    label       TEXT NOT NULL DEFAULT '',
    enqueued_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX resource_waiters_names ON resource_waiters USING gin (names);

CREATE TABLE resource_fair_share (
    fair_key TEXT PRIMARY KEY,
    served   BIGINT NOT NULL
);
CREATE SEQUENCE resource_served;

-- resource_queue is the live waiters in the order they are served (pos 1 first), on the
-- database's clock (aging). Dead waiters (engine past its lease) are left out.
CREATE VIEW resource_queue AS
    SELECT x.holder, x.engine_id, x.names, x.amounts, x.limits, x.caps, x.fair_key,
        row_number() OVER (ORDER BY x.eff DESC, x.rnk, f.served NULLS FIRST, x.seq) AS pos
    FROM (
        SELECT v.*, row_number() OVER (PARTITION BY v.eff, v.fair_key ORDER BY v.seq) AS rnk FROM (
            SELECT rw.*, rw.priority::BIGINT + CASE WHEN rw.aging_ms > 0
                THEN floor(greatest(extract(epoch FROM now() - rw.enqueued_at), 0) * 1000 / rw.aging_ms)::BIGINT ELSE 0 END AS eff
            FROM resource_waiters rw WHERE EXISTS (SELECT 1 FROM engines e WHERE e.id = rw.engine_id
                AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now())) v) x
    LEFT JOIN resource_fair_share f ON f.fair_key = x.fair_key;

-- resource_place is the place of waiter p_holder among the live waiters asking for one of
-- p_names (1 = next); 0 when it does not wait.
CREATE FUNCTION resource_place(p_names TEXT[], p_holder TEXT) RETURNS INTEGER
LANGUAGE sql STABLE AS $$
    WITH q AS (SELECT holder, names, pos FROM resource_queue)
    SELECT coalesce((SELECT count(*)::INTEGER FROM q WHERE q.names && p_names
        AND q.pos <= (SELECT pos FROM q WHERE holder = p_holder)), 0)
$$;

-- resource_dispatch grants, in the queue's order, every live waiter whose amounts fit and whose
-- resources are all among p_names (the caller holds their advisory locks, in name order): its
-- slots inserted, its row deleted, its key's turn recorded, and its engine woken with NOTIFY
-- dcc_flow_slots 'g:HOLDER'. A waiter that fits but also asks for a resource outside p_names
-- keeps its units reserved in this pass and is woken with 'w:HOLDER' (its own acquire locks all
-- its names and takes them). A waiter whose engine's probe caps that engine's own holders below
-- the amount is passed over without holding anything back. It returns the place of p_holder
-- among the waiters asking for one of p_names (1 = next), 0 when it was granted or does not
-- wait. Dead waiters (engine past its lease) are deleted first.
CREATE FUNCTION resource_dispatch(p_names TEXT[], p_holder TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    w RECORD;
    rn TEXT[] := '{}';
    ru BIGINT[] := '{}';
    rb BOOLEAN[] := '{}';
    j INTEGER;
    k INTEGER;
    fits BOOLEAN;
    capped BOOLEAN;
    eu BIGINT;
    place INTEGER := 0;
    seen BOOLEAN := p_holder = '';
    granted INTEGER := 0;
BEGIN
    DELETE FROM resource_waiters rw WHERE NOT EXISTS (
        SELECT 1 FROM engines e WHERE e.id = rw.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now());
    FOR w IN SELECT * FROM resource_queue ORDER BY pos
    LOOP
        fits := true;
        capped := false;
        FOR j IN 1 .. array_length(w.names, 1) LOOP
            k := array_position(rn, w.names[j]);
            IF k IS NULL THEN
                rn := rn || w.names[j];
                ru := ru || (SELECT coalesce(sum(s.amount), 0) FROM resource_slots s WHERE s.resource = w.names[j] AND EXISTS (
                    SELECT 1 FROM engines e WHERE e.id = s.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now()));
                rb := rb || false;
                k := array_length(rn, 1);
            END IF;
            IF rb[k] OR ru[k] + w.amounts[j] > w.limits[j] THEN
                fits := false;
            ELSIF w.caps[j] < w.limits[j] THEN
                SELECT coalesce(sum(s.amount), 0) INTO eu FROM resource_slots s WHERE s.resource = w.names[j] AND s.engine_id = w.engine_id;
                IF eu + w.amounts[j] > w.caps[j] THEN
                    capped := true;
                END IF;
            END IF;
        END LOOP;
        IF w.names && p_names AND NOT seen THEN
            place := place + 1;
        END IF;
        IF NOT fits THEN
            FOR j IN 1 .. array_length(w.names, 1) LOOP
                rb[array_position(rn, w.names[j])] := true;
            END LOOP;
        ELSIF NOT capped THEN
            FOR j IN 1 .. array_length(w.names, 1) LOOP
                k := array_position(rn, w.names[j]);
                ru[k] := ru[k] + w.amounts[j];
            END LOOP;
            IF w.names <@ p_names THEN
                INSERT INTO resource_slots (holder, resource, amount, taken_limit, engine_id, run_id, label)
                    SELECT w.holder, u.n, u.a, u.l, w.engine_id, rw.run_id, rw.label
                    FROM resource_waiters rw, unnest(w.names, w.amounts, w.limits) AS u(n, a, l) WHERE rw.holder = w.holder;
                DELETE FROM resource_waiters WHERE holder = w.holder;
                INSERT INTO resource_fair_share (fair_key, served) VALUES (w.fair_key, nextval('resource_served'))
                    ON CONFLICT (fair_key) DO UPDATE SET served = EXCLUDED.served;
                PERFORM pg_notify('dcc_flow_slots', 'g:' || w.holder);
                granted := granted + 1;
                IF w.holder = p_holder THEN
                    place := 0;
                END IF;
            ELSE
                PERFORM pg_notify('dcc_flow_slots', 'w:' || w.holder);
            END IF;
        END IF;
        IF w.holder = p_holder THEN
            seen := true;
        END IF;
        -- Nothing after this can be granted once every resource of p_names is held back.
        IF seen AND NOT EXISTS (SELECT 1 FROM unnest(p_names) AS n(name)
                WHERE NOT coalesce(rb[array_position(rn, n.name)], false)) THEN
            EXIT;
        END IF;
    END LOOP;
    IF granted > 0 AND (SELECT count(*) FROM resource_fair_share) > 64 + 2 * (SELECT count(*) FROM resource_waiters) THEN
        DELETE FROM resource_fair_share f WHERE NOT EXISTS (SELECT 1 FROM resource_waiters rw WHERE rw.fair_key = f.fair_key);
    END IF;
    IF NOT seen THEN
        RETURN 0;
    END IF;
    RETURN place;
END $$;

-- resource_acquire_queued takes the amounts of holder p_holder for engine p_engine in the
-- queue's order, in one round trip: 1 when taken (or held already: its waiter row is deleted),
-- -1 when the engine's own heartbeat is past its lease, 0 when it asked again and still waits
-- (p_again, below), else 1 + its place among the waiters of its resources (2 = next), its
-- waiter row registered (or kept: priority, key and arrival do not
-- change; caps are brought up to date). With no live waiter of its resources but itself it
-- takes the units when they fit, as resource_acquire does, without writing a waiter row; else
-- it runs resource_dispatch on its resources when one of them has a free unit, and only reads
-- its place when none has. p_again (the holder asked before): a registered waiter whose
-- resources have no free unit returns 0 at once, taking no lock and reading no place. p_aging_ms is
-- its aging (one point per that long waited; 0 none). p_names sorted, without duplicates;
-- p_amounts, p_limits and p_caps match them.
CREATE FUNCTION resource_acquire_queued(p_engine TEXT, p_holder TEXT, p_names TEXT[], p_amounts INTEGER[],
    p_limits INTEGER[], p_caps INTEGER[], p_run TEXT, p_label TEXT, p_priority INTEGER, p_key TEXT,
    p_aging_ms BIGINT, p_again BOOLEAN) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    i INTEGER;
    used BIGINT;
    fits BOOLEAN := true;
    place INTEGER;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM engines WHERE id = p_engine AND heartbeat_at + make_interval(secs => lease_secs) >= now()) THEN
        RETURN -1;
    END IF;
    -- A waiter asking again while every unit of its resources is held by live engines has
    -- nothing to take and nothing to serve: 0, without the locks and without reading its place
    -- (ordering the queue costs about 3 ms per 1,000 waiters; a grant deletes the row, so a
    -- registered waiter holds nothing).
    IF p_again AND EXISTS (SELECT 1 FROM resource_waiters WHERE holder = p_holder) THEN
        FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
            SELECT coalesce(sum(s.amount), 0) INTO used FROM resource_slots s WHERE s.resource = p_names[i] AND EXISTS (
                SELECT 1 FROM engines e WHERE e.id = s.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now());
            IF used < p_limits[i] THEN
                fits := false;
                EXIT;
            END IF;
        END LOOP;
        IF fits THEN
            UPDATE resource_waiters SET caps = p_caps WHERE holder = p_holder AND caps IS DISTINCT FROM p_caps;
            RETURN 0;
        END IF;
        fits := true;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        PERFORM pg_advisory_xact_lock(1684235110, hashtext(p_names[i]));
    END LOOP;
    IF EXISTS (SELECT 1 FROM resource_slots WHERE holder = p_holder) THEN
        DELETE FROM resource_waiters WHERE holder = p_holder;
        RETURN 1;
    END IF;
    DELETE FROM resource_slots s WHERE s.resource = ANY(p_names) AND NOT EXISTS (
        SELECT 1 FROM engines e WHERE e.id = s.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now());
    IF NOT EXISTS (SELECT 1 FROM resource_waiters rw WHERE rw.names && p_names AND rw.holder <> p_holder AND EXISTS (
            SELECT 1 FROM engines e WHERE e.id = rw.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now())) THEN
        FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
            SELECT coalesce(sum(amount), 0) INTO used FROM resource_slots WHERE resource = p_names[i];
            IF used + p_amounts[i] > p_limits[i] THEN
                fits := false;
                EXIT;
            END IF;
            IF p_caps[i] < p_limits[i] THEN
                SELECT coalesce(sum(amount), 0) INTO used FROM resource_slots WHERE resource = p_names[i] AND engine_id = p_engine;
                IF used + p_amounts[i] > p_caps[i] THEN
                    fits := false;
                    EXIT;
                END IF;
            END IF;
        END LOOP;
        IF fits THEN
            DELETE FROM resource_waiters WHERE holder = p_holder;
            INSERT INTO resource_slots (holder, resource, amount, taken_limit, engine_id, run_id, label)
                SELECT p_holder, u.n, u.a, u.l, p_engine, p_run, p_label FROM unnest(p_names, p_amounts, p_limits) AS u(n, a, l);
            RETURN 1;
        END IF;
    END IF;
    INSERT INTO resource_waiters (holder, engine_id, names, amounts, limits, caps, priority, aging_ms, fair_key, run_id, label)
        VALUES (p_holder, p_engine, p_names, p_amounts, p_limits, p_caps, p_priority, p_aging_ms, p_key, p_run, p_label)
        ON CONFLICT (holder) DO UPDATE SET caps = EXCLUDED.caps WHERE resource_waiters.caps IS DISTINCT FROM EXCLUDED.caps;
    IF NOT fits THEN -- no other waiter: it is next
        RETURN 2;
    END IF;
    -- Others wait: serve the queue when one of its resources has a free unit, else only read
    -- its place (a waiter asking again is cheap while every unit is held).
    fits := false;
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        SELECT coalesce(sum(amount), 0) INTO used FROM resource_slots WHERE resource = p_names[i];
        IF used < p_limits[i] THEN
            fits := true;
            EXIT;
        END IF;
    END LOOP;
    IF NOT fits THEN
        RETURN resource_place(p_names, p_holder) + 1;
    END IF;
    place := resource_dispatch(p_names, p_holder);
    IF place = 0 THEN
        RETURN 1;
    END IF;
    RETURN place + 1;
END $$;

-- resource_serve serves the waiters of p_names (sorted, without duplicates) after a release
-- that found some: it takes their advisory locks, in name order, and dispatches them. (The
-- release itself is one statement: a holder releasing is no waiter, so no dispatch grants it
-- meanwhile, and its rows may go without the locks.)
CREATE FUNCTION resource_serve(p_names TEXT[]) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    i INTEGER;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        PERFORM pg_advisory_xact_lock(1684235110, hashtext(p_names[i]));
    END LOOP;
    IF EXISTS (SELECT 1 FROM resource_waiters rw WHERE rw.names && p_names) THEN
        PERFORM resource_dispatch(p_names, '');
    END IF;
END $$;

-- resource_leave removes the waiter p_holder of engine p_engine (a cancelled wait), giving back
-- the units it was granted meanwhile, and returns the number of slot rows deleted. It takes the
-- advisory locks of its resources first (a dispatch may be granting it), then serves the
-- waiters now first.
CREATE FUNCTION resource_leave(p_engine TEXT, p_holder TEXT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
    v_names TEXT[];
    i INTEGER;
    v_n INTEGER;
BEGIN
    SELECT names INTO v_names FROM resource_waiters WHERE holder = p_holder AND engine_id = p_engine;
    IF v_names IS NULL THEN
        SELECT array_agg(resource ORDER BY resource COLLATE "C") INTO v_names FROM resource_slots WHERE holder = p_holder AND engine_id = p_engine;
    END IF;
    IF v_names IS NULL THEN
        RETURN 0;
    END IF;
    FOR i IN 1 .. array_length(v_names, 1) LOOP
        PERFORM pg_advisory_xact_lock(1684235110, hashtext(v_names[i]));
    END LOOP;
    DELETE FROM resource_waiters WHERE holder = p_holder AND engine_id = p_engine;
    DELETE FROM resource_slots WHERE holder = p_holder AND engine_id = p_engine;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF EXISTS (SELECT 1 FROM resource_waiters rw WHERE rw.names && v_names) THEN
        PERFORM resource_dispatch(v_names, '');
    END IF;
    RETURN v_n;
END $$;
