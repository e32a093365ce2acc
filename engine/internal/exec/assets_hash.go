package exec

import (
	"context"
	"runtime"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
)

// maxHashCache bounds the stat cache of an executor: past it, the cache starts afresh.
const maxHashCache = 200_000

// parallelHashBytes is how many bytes the files that must be read at once hold before hashAll
// reads them on several goroutines: below it (the files of a typical step, a cache lookup's
// racy outputs) starting goroutines and waiting for them costs more than the reads, and on a
// loaded machine each goroutine's turn at a core adds its wait to the step's.
const parallelHashBytes = 4 << 20

// hashCache is the stat cache of an executor: the last hash of each path, trusted again without
// reading the file while its size, modification time, device and inode are unchanged
// (filehash.Recheck, git's index).
type hashCache struct {
	mu sync.Mutex
	m  map[string]filehash.Result
}

// trusted returns the hash the stat cache holds for path, or known (a recorded state) when it
// holds none: a StateOK result with a hash that is not racy, which a stat equal to its Info
// confirms without reading the file; ok false when there is none.
func (c *hashCache) trusted(path string, known *filehash.Result) (filehash.Result, bool) {
	c.mu.Lock()
	prev, ok := c.m[path]
	c.mu.Unlock()
	if !ok || prev.State != filehash.StateOK {
		if known == nil || known.State != filehash.StateOK {
			return filehash.Result{}, false
		}
		prev = *known
	}
	if prev.Hash == "" || prev.Racy {
		return filehash.Result{}, false
	}
	return prev, true
}

// put records res as path's newest hash (or forgets path when res is not ok).
func (c *hashCache) put(path string, res filehash.Result) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxHashCache {
		c.m = map[string]filehash.Result{}
	}
	if res.State == filehash.StateOK {
		c.m[path] = res
	} else {
		delete(c.m, path)
	}
	c.mu.Unlock()
}

// hashAll returns the state and hash of each of paths now, in their order, reading a file only
// when it changed since the cache, or known[i] (what a record says of paths[i], when given),
// last saw it: each file is stat'ed (stats[p], when given, is a stat of p the caller took just
// before: it stands for that one), and one whose stat equals a trusted hash's is not read
// (filehash.Recheck's rule). The files to read are read here, on up to GOMAXPROCS goroutines
// only when there are several holding parallelHashBytes or more between them.
func (c *hashCache) hashAll(ctx context.Context, paths []string, known []*filehash.Result, stats map[string]filehash.Info) []filehash.Result {
	out := make([]filehash.Result, len(paths))
	var read []int     // the indexes of the files to read
	var readSize int64 // what their stats say they hold
	for i, p := range paths {
		info, have := stats[p]
		if !have {
			var err error
			if info, err = filehash.Stat(p); err != nil {
				read = append(read, i) // HashFile says what is wrong with it
				continue
			}
		}
		if prev, ok := c.trusted(p, knownAt(known, i)); ok && info.Mode.IsRegular() && info.Same(prev.Info) {
			out[i] = filehash.Result{Info: info, State: filehash.StateOK, Hash: prev.Hash, ReadAt: prev.ReadAt}
			c.put(p, out[i])
			continue
		}
		read = append(read, i)
		readSize += info.Size
	}
	workers := min(runtime.GOMAXPROCS(0), len(read))
	if workers <= 1 || readSize < parallelHashBytes {
		for _, i := range read {
			out[i] = filehash.HashFile(ctx, paths[i])
			c.put(paths[i], out[i])
		}
		return out
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = filehash.HashFile(ctx, paths[i])
				c.put(paths[i], out[i])
			}
		}()
	}
	for _, i := range read {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

func knownAt(known []*filehash.Result, i int) *filehash.Result {
	if i < len(known) {
		return known[i]
	}
	return nil
}
