package ui_test

import (
	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// fakeClock is the injected clock of sessions and throttling.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A session ends when unused for SessionIdle, SessionMax after its sign-in however used, and at
// once when signed out (POST /api/logout, which clears its cookies); the other sessions live on.
func TestRedteamSessionExpiresAndSignOutRevokes(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	h := ui.Handler(newEngine(t, ""), ui.Options{Token: rtToken, SessionIdle: time.Hour, SessionMax: 3 * time.Hour, Now: clk.Now})
	get := func(s *http.Cookie) int { return rtDo(h, "GET", "/api/runs", "10.0.0.7:1", "", withCookies(s)).Code }

	_, cs := rtSignIn(t, h, rtToken, "10.0.0.7:1")
	idle := sessionOf(cs)
	_, cs = rtSignIn(t, h, rtToken, "10.0.0.7:1")
	busy := sessionOf(cs)
	_, cs = rtSignIn(t, h, rtToken, "10.0.0.7:1")
	out, outCSRF := sessionOf(cs), cs["dccflow_csrf_8780"]

	// Sign-out: the session ends, the others do not.
	w := rtDo(h, "POST", "/api/logout", "10.0.0.7:1", "", withCookies(out, outCSRF), func(r *http.Request) { r.Header.Set(ui.CSRFHeader, outCSRF.Value) })
	if w.Code != 200 {
		t.Fatalf("sign-out: %d %s", w.Code, w.Body)
	}
	for _, c := range cookiesOf(w) {
		if c.MaxAge >= 0 {
			t.Errorf("sign-out leaves cookie %s (Max-Age %d)", c.Name, c.MaxAge)
		}
	}
	if got := get(out); got != 401 {
		t.Errorf("a signed-out session: %d, want 401", got)
	}
	// Sign-out needs the session's CSRF value (a page elsewhere cannot sign the user out).
	if w := rtDo(h, "POST", "/api/logout", "10.0.0.7:1", "", withCookies(busy)); w.Code != 403 {
		t.Errorf("sign-out without the CSRF header: %d", w.Code)
	}

	// Idle: used every 50 min, busy lives on; idle, unused for an hour, ends.
	for range 2 {
		clk.add(50 * time.Minute)
		if got := get(busy); got != 200 {
			t.Fatalf("a session used every 50 min: %d", got)
		}
	}
	if got := get(idle); got != 401 {
		t.Errorf("a session unused for 100 min (idle limit 1 h): %d, want 401", got)
	}
	// Absolute: 3 h after its sign-in, even a busy session ends.
	for range 3 {
		clk.add(25 * time.Minute)
		if got := get(busy); got != 200 {
			t.Fatalf("a busy session before its 3 h: %d", got)
		}
	}
	clk.add(10 * time.Minute)
	if got := get(busy); got != 401 {
		t.Errorf("a session 3 h 5 min after its sign-in (limit 3 h): %d, want 401", got)
	}
}

// Throttling ends: once Retry-After has passed, the right token works again from the address
// that was throttled; and a session signed in before is never throttled.
func TestRedteamThrottleEndsAndSparesSessions(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	h := ui.Handler(newEngine(t, ""), ui.Options{Token: rtToken, Now: clk.Now})
	const shared = "192.0.2.50:1000" // a guesser and a signed-in user behind one address
	_, cs := rtSignIn(t, h, rtToken, shared)
	s := sessionOf(cs)
	for i := 0; i < httpauth.ThrottleFree+20; i++ {
		_ = rtDo(h, "GET", "/api/runs", shared, "", bearer("guess"))
		clk.add(time.Second)
	}
	w := rtDo(h, "GET", "/api/runs", shared, "", bearer(rtToken))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("the right token while throttled: %d", w.Code)
	}
	if got := rtDo(h, "GET", "/api/runs", shared, "", withCookies(s)).Code; got != 200 {
		t.Errorf("a signed-in session from the throttled address: %d, want 200", got)
	}
	retry, _ := time.ParseDuration(w.Header().Get("Retry-After") + "s")
	if retry <= 0 || retry > httpauth.ThrottleMaxWait {
		t.Fatalf("Retry-After %q: want 1 s to %s", w.Header().Get("Retry-After"), httpauth.ThrottleMaxWait)
	}
	clk.add(retry)
	if got := rtDo(h, "GET", "/api/runs", shared, "", bearer(rtToken)).Code; got != 200 {
		t.Errorf("the right token after Retry-After: %d, want 200", got)
	}
}
