package remote

import (
	"context"
	"sync"
	"testing"
	"time"
)

// units is a UnitsFunc over a limit of one resource, counting what is held and what was the
// most at once, and which workers took and gave back.
type units struct {
	mu        sync.Mutex
	free      chan struct{} // a token per unit
	held, max int
	taken     []int // worker ids, in the order they took their unit
	back      int
	waiting   int // takers waiting for a unit now
}

func newUnits(limit int) *units {
	u := &units{free: make(chan struct{}, limit)}
	for range limit {
		u.free <- struct{}{}
	}
	return u
}

func (u *units) take(ctx context.Context, remote string, worker int, amounts map[string]int) (func(), error) {
	if remote != "srv" || amounts["lic"] != 1 {
		panic("units asked for " + remote)
	}
	u.mu.Lock()
	u.waiting++
	u.mu.Unlock()
	select {
	case <-u.free:
	case <-ctx.Done():
		u.mu.Lock()
		u.waiting--
		u.mu.Unlock()
		return nil, ctx.Err()
	}
	u.mu.Lock()
	u.waiting--
	u.held++
	u.max = max(u.max, u.held)
	u.taken = append(u.taken, worker)
	u.mu.Unlock()
	return func() {
		u.mu.Lock()
		u.held--
		u.back++
		u.mu.Unlock()
		u.free <- struct{}{}
	}, nil
}

func (u *units) counts() (held, most, back int, taken []int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.held, u.max, u.back, append([]int(nil), u.taken...)
}

// pooledWithUnits is a pool of up to 4 workers whose each holds lic ×1 of u while it lives.
func pooledWithUnits(t *testing.T, u *units, mod func(*Config)) *bundle {
	t.Helper()
	b := &bundle{logPath: t.TempDir() + "/events.log"}
	cfg := Config{Command: []string{serverBin, "-log", b.logPath}, Workers: 4, Resources: map[string]int{"lic": 1}}
	if mod != nil {
		mod(&cfg)
	}
	pool, err := NewPool(map[string]Config{"srv": cfg}, WithUnits(u.take))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b.pool = pool
	return b
}

// A pool's Resources are what each worker holds while it lives: with one unit, one worker
// runs however many calls wait (they take turns on it), the others' starts wait for the unit;
// a recycled worker gives its unit back before its successor takes it; Close gives back all.
func TestWorkerHoldsItsUnitsWhileItLives(t *testing.T) {
	u := newUnits(1)
	b := pooledWithUnits(t, u, func(c *Config) { c.RecycleAfterCalls = 3 })
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if res := b.call(t, nil, "sleep", map[string]any{"ms": 50}); res.IsError {
				t.Errorf("sleep: %s: %s", res.Kind, res.Message)
			}
		})
	}
	wg.Wait()
	held, most, back, taken := u.counts()
	if most != 1 {
		t.Fatalf("%d units held at once; the limit is 1", most)
	}
	// 5 calls, a worker recycled after 3: the first worker, then its successor (idle after 2).
	if len(taken) < 2 || back < 1 {
		t.Fatalf("workers that took a unit %v, gave back %d: want the recycled worker's unit given back to its successor", taken, back)
	}
	if held != 1 {
		t.Fatalf("%d units held with the successor idle; want 1 (an idle worker still holds its licence)", held)
	}
	// The starts that waited for a unit for calls the running worker served gave up: none is
	// left to take the licence when that worker stops.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		u.mu.Lock()
		waiting := u.waiting
		u.mu.Unlock()
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d worker starts still wait for a unit with no call waiting", waiting)
		}
	}
	if info := b.pool.Pools()[0]; len(info.Workers) != 1 {
		t.Fatalf("the pool lists %d workers after the calls; want the one holding the unit: %+v", len(info.Workers), info.Workers)
	}
	b.pool.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if held, _, _, _ := u.counts(); held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool closed, but its workers' units were not given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A worker that cannot start gives its unit back at once; a worker lost during a call gives
// its unit back, and the next worker takes it.
func TestWorkerUnitsFreedOnFailure(t *testing.T) {
	u := newUnits(1)
	bad := pooledWithUnits(t, u, func(c *Config) { c.Command = []string{"/nonexistent/dcc-flow-worker"} })
	if res := bad.call(t, nil, "count", nil); !res.IsError {
		t.Fatalf("a worker that cannot start answered: %+v", res)
	}
	if held, _, back, _ := u.counts(); held != 0 || back != 1 {
		t.Fatalf("after a failed start: %d held, %d given back; want 0 and 1", held, back)
	}
	b := pooledWithUnits(t, u, func(c *Config) { c.Workers = 1 })
	first := pidOf(t, b.call(t, nil, "count", nil))
	if res := b.call(t, nil, "crash", map[string]any{"code": 3}); !res.IsError {
		t.Fatalf("crash answered: %+v", res)
	}
	if second := pidOf(t, b.call(t, nil, "count", nil)); second == first {
		t.Fatal("the lost worker answered again")
	}
	if held, most, _, _ := u.counts(); held != 1 || most != 1 {
		t.Fatalf("after a worker was lost and replaced: %d held (most %d); want 1 (the replacement's)", held, most)
	}
}

// A start waiting for its units ends when the pool closes: the call waiting for that worker
// fails, and nothing is held.
func TestWorkerWaitingForUnitsEndsWithThePool(t *testing.T) {
	u := newUnits(1)
	<-u.free // another holder has the only unit
	b := pooledWithUnits(t, u, nil)
	done := make(chan Result, 1)
	go func() { done <- b.call(t, nil, "count", nil) }()
	select {
	case res := <-done:
		t.Fatalf("a call ran with no unit free: %+v", res)
	case <-time.After(300 * time.Millisecond):
	}
	b.pool.Close()
	select {
	case res := <-done:
		if !res.IsError {
			t.Fatalf("the waiting call answered after the pool closed: %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call waiting for a worker's units did not end when the pool closed")
	}
	if held, _, _, taken := u.counts(); held != 0 || len(taken) != 0 {
		t.Fatalf("%d held, taken by %v; want nothing", held, taken)
	}
}
