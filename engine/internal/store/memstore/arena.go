package memstore

// arena holds the bytes of step and event records (keys, outputs, details) in large
// append-only chunks, so that the records themselves hold no pointers and cost the garbage
// collector nothing to keep. Bytes are never modified once written.
type arena struct {
	chunks [][]byte
	cur    int // index of the chunk small values are appended to; -1 before the first
}

// span locates bytes in the arena; the zero span is empty.
type span struct {
	chunk, off, n uint32
}

const (
	arenaChunk = 1 << 20
	// values above this size get a chunk of their own
	arenaLarge = arenaChunk / 8
)

func newArena() arena { return arena{cur: -1} }

func (a *arena) put(b []byte) span {
	if len(b) == 0 {
		return span{}
	}
	if len(b) > arenaLarge {
		a.chunks = append(a.chunks, append([]byte(nil), b...))
		return span{chunk: uint32(len(a.chunks) - 1), n: uint32(len(b))}
	}
	if a.cur < 0 || cap(a.chunks[a.cur])-len(a.chunks[a.cur]) < len(b) {
		a.chunks = append(a.chunks, make([]byte, 0, arenaChunk))
		a.cur = len(a.chunks) - 1
	}
	c := a.chunks[a.cur]
	sp := span{chunk: uint32(a.cur), off: uint32(len(c)), n: uint32(len(b))}
	a.chunks[a.cur] = append(c, b...)
	return sp
}

func (a *arena) putString(s string) span {
	if len(s) == 0 {
		return span{}
	}
	if len(s) > arenaLarge {
		a.chunks = append(a.chunks, []byte(s))
		return span{chunk: uint32(len(a.chunks) - 1), n: uint32(len(s))}
	}
	if a.cur < 0 || cap(a.chunks[a.cur])-len(a.chunks[a.cur]) < len(s) {
		a.chunks = append(a.chunks, make([]byte, 0, arenaChunk))
		a.cur = len(a.chunks) - 1
	}
	c := a.chunks[a.cur]
	sp := span{chunk: uint32(a.cur), off: uint32(len(c)), n: uint32(len(s))}
	a.chunks[a.cur] = append(c, s...)
	return sp
}

// bytes returns the bytes of sp, shared with the arena (callers must not modify them); nil for
// the empty span.
func (a *arena) bytes(sp span) []byte {
	if sp.n == 0 {
		return nil
	}
	return a.chunks[sp.chunk][sp.off : sp.off+sp.n : sp.off+sp.n]
}

func (a *arena) string(sp span) string { return string(a.bytes(sp)) }

// equal reports whether sp holds s.
func (a *arena) equal(sp span, s string) bool { return string(a.bytes(sp)) == s }

// codes maps the few distinct status, kind and event-type strings (a few dozen) to small numbers.
// Code 0 is "". A linear scan over so few short strings beats hashing them.
type codes struct {
	names []string
}

func newCodes() codes { return codes{names: []string{""}} }

func (c *codes) code(name string) uint16 {
	for i, n := range c.names {
		if len(n) == len(name) && n == name {
			return uint16(i)
		}
	}
	if len(c.names) > 0xFFFF {
		// Statuses, kinds and event types are a fixed vocabulary; never reached in practice.
		return 0
	}
	c.names = append(c.names, name)
	return uint16(len(c.names) - 1)
}

func (c *codes) name(i uint16) string { return c.names[i] }
