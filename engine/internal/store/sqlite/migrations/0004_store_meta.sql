-- Values of the store itself. 'last_seq' is the largest event seq ever assigned, written by a
-- prune before it deletes events: the next owner starts numbering after it even when the
-- newest events are gone, so a seq is never assigned twice.
CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
