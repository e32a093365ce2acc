package main

import (
	"hash/maphash"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// parsedSpecs keeps the specs parsed from the last few distinct texts a host submitted: a
// script that runs the same workflow text again and again (engine.run(spec) for each shot, a
// benchmark's chain) had it parsed whole each time, 10–13 µs per step (docs/design/performance.md).
// A parsed spec is never changed once parsed (registered workflows are shared by their runs the
// same way), so one can serve every run of its text.
var parsedSpecs specCache

// maxCachedSpecText bounds the text of a spec the cache keeps (its copy and its parse are held).
const maxCachedSpecText = 1 << 20

// specCache is a small cache of parsed specs by their exact text, format and source.
type specCache struct {
	mu      sync.Mutex
	seed    maphash.Seed
	entries [4]specCacheEntry
	last    int // the entry written last
}

type specCacheEntry struct {
	sum  uint64
	key  specKey
	spec *spec.Spec
}

type specKey struct {
	text, format, source string
}

// parse returns text parsed with opts, from the cache when the same text was parsed with the same
// options lately. Errors are not kept: text that fails is parsed again each time.
func (c *specCache) parse(text []byte, opts spec.Options) (*spec.Spec, error) {
	if len(text) > maxCachedSpecText {
		return spec.Parse(text, opts)
	}
	c.mu.Lock()
	if c.seed == (maphash.Seed{}) {
		c.seed = maphash.MakeSeed()
	}
	sum := maphash.Bytes(c.seed, text)
	for i := range c.entries {
		e := &c.entries[i]
		if e.spec != nil && e.sum == sum && e.key.format == string(opts.Format) && e.key.source == opts.Source &&
			e.key.text == string(text) {
			s := e.spec
			c.mu.Unlock()
			return s, nil
		}
	}
	c.mu.Unlock()
	s, err := spec.Parse(text, opts)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.last = (c.last + 1) % len(c.entries)
	c.entries[c.last] = specCacheEntry{sum: sum, key: specKey{string(text), string(opts.Format), opts.Source}, spec: s}
	c.mu.Unlock()
	return s, nil
}
