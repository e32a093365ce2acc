package groupcommit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queued is how many items wait in c's queue.
func queued[T any](c *Committer[T]) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// A lone writer never yields; while writers are concurrent (the last group held more than one
// item, or the lead was handed over), each leader yields once before it takes its group, so
// that running writers join it (the package comment).
func TestLeaderYieldsOnlyWhileWritersAreConcurrent(t *testing.T) {
	var yields atomic.Int64
	release := make(chan struct{})
	var held atomic.Bool
	c := &Committer[int]{Yield: func() { yields.Add(1) }, Commit: func(group []int) ([]error, error) {
		if group[0] == 0 && held.CompareAndSwap(false, true) {
			<-release // the first group commits slowly: the others queue behind it
		}
		return nil, nil
	}}
	for i := range 3 {
		if err := c.Do(100 + i); err != nil {
			t.Fatal(err)
		}
	}
	if n := yields.Load(); n != 0 {
		t.Fatalf("a lone writer yielded %d times; want none", n)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Do(0) }()
	for !held.Load() {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i <= 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Do(i) }()
	}
	for queued(c) < 4 { // the four queue behind the held group (none leads)
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	// The lead was handed to the first of the four, which yielded and took all four.
	if n := yields.Load(); n != 1 {
		t.Fatalf("%d yields; want 1 (the leader handed the lead)", n)
	}
	// The last group held four: the next leader, alone, yields once, then no more.
	for i := range 2 {
		if err := c.Do(200 + i); err != nil {
			t.Fatal(err)
		}
	}
	if n := yields.Load(); n != 2 {
		t.Fatalf("%d yields; want 2 (once after a group of four, then none for a lone writer)", n)
	}
}
