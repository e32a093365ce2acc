package groupcommit_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store/groupcommit"
)

// Concurrent callers share transactions, each gets its own outcome, and Close waits for the
// queued items and refuses later ones.
func TestGroupsConcurrentCallers(t *testing.T) {
	var commits, items atomic.Int64
	bad := errors.New("bad item")
	c := &groupcommit.Committer[int]{Max: 16, Commit: func(group []int) ([]error, error) {
		time.Sleep(2 * time.Millisecond) // a commit takes time: callers queue meanwhile
		commits.Add(1)
		items.Add(int64(len(group)))
		if len(group) > 16 {
			t.Errorf("group of %d > Max", len(group))
		}
		errs := make([]error, len(group))
		for i, v := range group {
			if v%10 == 3 {
				errs[i] = bad
			}
		}
		return errs, nil
	}}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Do(i)
			if (i%10 == 3) != errors.Is(err, bad) {
				t.Errorf("item %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	c.Close()
	if items.Load() != 200 || commits.Load() >= 200/2 {
		t.Fatalf("%d items in %d commits: not grouped", items.Load(), commits.Load())
	}
	if err := c.Do(1); !errors.Is(err, groupcommit.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
	c.Close()
}

// An error of the whole group reaches every caller of the group.
func TestGroupError(t *testing.T) {
	boom := errors.New("boom")
	c := &groupcommit.Committer[int]{Commit: func([]int) ([]error, error) { return nil, boom }}
	if err := c.Do(1); !errors.Is(err, boom) {
		t.Fatal(err)
	}
}

// Observe sees each group committed (its size and Commit's duration), not a group that failed
// whole, and nothing once set to nil.
func TestObserve(t *testing.T) {
	fail := false
	c := &groupcommit.Committer[int]{Commit: func(group []int) ([]error, error) {
		time.Sleep(time.Millisecond)
		if fail {
			return nil, errors.New("disk gone")
		}
		return nil, nil
	}}
	var seen []int
	var took []time.Duration
	c.Observe(func(items int, d time.Duration) { seen, took = append(seen, items), append(took, d) })
	for i := range 3 {
		if err := c.Do(i); err != nil {
			t.Fatal(err)
		}
	}
	fail = true
	if err := c.Do(9); err == nil {
		t.Fatal("the failing group succeeded")
	}
	fail = false
	c.Observe(nil)
	if err := c.Do(10); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[0] != 1 || took[0] < time.Millisecond {
		t.Fatalf("observed groups %v taking %v; want 3 groups of 1, each ≥ 1 ms", seen, took)
	}
}
