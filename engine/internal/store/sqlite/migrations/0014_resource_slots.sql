-- The slots of scarce resources (store.ResourceSlots, docs/guide/resources.md): one row per
-- holder and resource. The owner process holds the slots in memory and writes this table after
-- each change (coalesced, in the background), so that another process reading the file
-- (`dcc-flow resources`) lists the holders; the owner never reads it. A new owner rewrites it
-- whole at its first change. Times are Unix nanoseconds.
CREATE TABLE resource_slots (
    holder      TEXT NOT NULL,
    resource    TEXT NOT NULL,
    amount      INTEGER NOT NULL,
    taken_limit INTEGER NOT NULL DEFAULT 0,
    run_id      TEXT NOT NULL DEFAULT '',
    label       TEXT NOT NULL DEFAULT '',
    acquired_at INTEGER NOT NULL,
    PRIMARY KEY (holder, resource)
);
