package httpauth

import (
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Wrong tokens sent at once from one address are throttled as if sent one after the other: a
// check and the record of its failure are one step, so a burst cannot pass the "not throttled"
// test before the first of its failures is counted (20 parallel guesses were all checked, 100s
// per burst with more connections, where ThrottleFree+1 are allowed).
func TestRedteamThrottleHoldsAgainstParallelGuesses(t *testing.T) {
	const n = 20
	base := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	// The clock is a barrier, twice: each of the first n readings waits until n were made, and
	// so does each of the next n. The burst's requests all start (read the time) before any goes
	// on, as they would on a busy many-core server; a check that reads the clock again to record
	// its failure waits there until every request of the burst has been decided.
	var arrived atomic.Int32
	phases := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var once [2]sync.Once
	now := func() time.Time {
		k := arrived.Add(1)
		if k <= 2*n {
			p := (k - 1) / n
			if k == (p+1)*n {
				once[p].Do(func() { close(phases[p]) })
			}
			select {
			case <-phases[p]:
			case <-time.After(2 * time.Second): // never a hang
			}
		}
		return base
	}
	th := NewThrottle(now)
	var checked atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest("GET", "/api/runs", nil)
			r.RemoteAddr = "198.51.100.7:4000"
			r.Header.Set("Authorization", "Bearer wrong-guess")
			if ok, wait := th.Bearer(r, "the-right-token-0123456789"); ok {
				t.Error("a wrong token was let in")
			} else if wait == 0 {
				checked.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := checked.Load(); got > ThrottleFree+1 {
		t.Fatalf("%d of %d parallel wrong tokens were checked; at most %d may be before the address waits", got, n, ThrottleFree+1)
	}
	// The right token from a clean address is still let in, in parallel, without a wait.
	th2 := NewThrottle(time.Now)
	var in atomic.Int32
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest("GET", "/api/runs", nil)
			r.RemoteAddr = "198.51.100.8:4000"
			r.Header.Set("Authorization", "Bearer the-right-token-0123456789")
			if ok, _ := th2.Bearer(r, "the-right-token-0123456789"); ok {
				in.Add(1)
			}
		}()
	}
	wg.Wait()
	if in.Load() != n {
		t.Fatalf("%d of %d parallel right tokens let in", in.Load(), n)
	}
}
