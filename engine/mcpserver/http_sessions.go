package mcpserver

import (
	"context"
	"net/http"
	"runtime/debug"
	"sync"
	"time"
)

// Session limits of the HTTP transport. Every MCP session holds about 10 KB in mcp-go (its
// notification queue) until the client DELETEs it, so sessions that clients abandon are ended
// by the server: without this, initialize requests alone grow the host without bound (3,000
// cost 30 MB).
const (
	// DefaultMaxSessions caps the sessions open at once; WithMaxSessions changes it (1 to
	// 1,000,000). An initialize over the cap first ends the oldest session that never sent a
	// second request; when there is none it is answered 503 too_many_sessions.
	DefaultMaxSessions = 1000
	// DefaultSessionIdleTimeout ends a session with no request in flight (a GET stream counts)
	// and none for this long; WithSessionIdleTimeout changes it.
	DefaultSessionIdleTimeout = 30 * time.Minute
	// UnusedSessionTimeout ends a session that sent nothing after its initialize (a client
	// sends notifications/initialized at once); a shorter idle timeout applies to them too.
	UnusedSessionTimeout = 30 * time.Second
)

// WithMaxSessions caps the MCP sessions open at once (0 = DefaultMaxSessions; 1 to 1,000,000).
func WithMaxSessions(n int) HTTPOption {
	return func(c *httpConfig) {
		switch {
		case n == 0:
		case n < 1 || n > 1_000_000:
			c.problems = append(c.problems, "mcp_max_sessions must be from 1 to 1000000 (0 = the default, 1000)")
		default:
			c.maxSessions = n
		}
	}
}

// WithSessionIdleTimeout ends sessions idle for d (0 = DefaultSessionIdleTimeout; at least one
// second): no request in flight and none for d. A client whose session ended gets 404 and
// initializes again.
func WithSessionIdleTimeout(d time.Duration) HTTPOption {
	return func(c *httpConfig) {
		switch {
		case d == 0:
		case d < time.Second:
			c.problems = append(c.problems, "the MCP session idle timeout must be at least 1s (0 = the default, 30m)")
		default:
			c.idle = d
		}
	}
}

// sessionTracker knows the sessions of one handler: when each was last active, whether a
// request of it is in flight, and whether it sent anything after its initialize. It ends
// sessions through the handler itself (a DELETE), the way a client does.
type sessionTracker struct {
	h       http.Handler // mcp-go's handler
	max     int
	idle    time.Duration
	unused  time.Duration
	now     func() time.Time
	mu      sync.Mutex
	byID    map[string]*trackedSession
	stopped chan struct{}
	stop    sync.Once
}

type trackedSession struct {
	created time.Time
	last    time.Time
	busy    int
	used    bool
}

func newSessionTracker(h http.Handler, cfg *httpConfig) *sessionTracker {
	return &sessionTracker{h: h, max: cfg.maxSessions, idle: cfg.idle, unused: min(UnusedSessionTimeout, cfg.idle), now: time.Now,
		byID: map[string]*trackedSession{}, stopped: make(chan struct{})}
}

// begin marks a request of session id in flight; end must follow.
func (t *sessionTracker) begin(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.byID[id]; s != nil {
		s.busy++
		s.used = true
		s.last = t.now()
	}
}

func (t *sessionTracker) end(id string, deleted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.byID[id]; s != nil {
		if deleted {
			delete(t.byID, id)
			return
		}
		s.busy--
		s.last = t.now()
	}
}

// admit reports whether a new session may be opened, ending the oldest unused idle session
// first when the tracker is full.
func (t *sessionTracker) admit() bool {
	t.mu.Lock()
	if len(t.byID) < t.max {
		t.mu.Unlock()
		return true
	}
	var oldest string
	var at time.Time
	for id, s := range t.byID {
		if !s.used && s.busy == 0 && (oldest == "" || s.created.Before(at)) {
			oldest, at = id, s.created
		}
	}
	if oldest != "" {
		delete(t.byID, oldest)
	}
	t.mu.Unlock()
	if oldest == "" {
		return false
	}
	t.terminate(oldest)
	return true
}

// opened records a session that an initialize just opened.
func (t *sessionTracker) opened(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[id]; !ok {
		now := t.now()
		t.byID[id] = &trackedSession{created: now, last: now}
	}
}

// sweep ends the sessions that are idle past their timeout and returns how many.
func (t *sessionTracker) sweep() int {
	now := t.now()
	var ids []string
	t.mu.Lock()
	for id, s := range t.byID {
		limit := t.idle
		if !s.used {
			limit = t.unused
		}
		if s.busy == 0 && now.Sub(s.last) >= limit {
			ids = append(ids, id)
			delete(t.byID, id)
		}
	}
	t.mu.Unlock()
	for _, id := range ids {
		t.terminate(id)
	}
	return len(ids)
}

// terminate ends session id as the client's DELETE would (mcp-go drops its state, the server's
// hooks end its subscriptions).
func (t *sessionTracker) terminate(id string) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodDelete, "/mcp", nil)
	if err != nil {
		return
	}
	req.Header.Set("Mcp-Session-Id", id)
	t.h.ServeHTTP(discard{h: http.Header{}}, req)
}

// discard is a ResponseWriter that keeps nothing (the answer to the server's own DELETE).
type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

func (t *sessionTracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// burstSessions is how many sessions one sweep must end for the server to hand the memory back
// to the system at once (debug.FreeOSMemory) rather than at the Go runtime's pace: an idle
// runtime collects at the latest every 2 minutes and returns pages some time after that, so
// the host would keep a burst's memory for about 3 minutes.
const burstSessions = 100

// run sweeps until close, every 5 s (more often with short timeouts).
func (t *sessionTracker) run() {
	tk := time.NewTicker(min(5*time.Second, t.unused/2))
	defer tk.Stop()
	for {
		select {
		case <-t.stopped:
			return
		case <-tk.C:
			if t.sweep() >= burstSessions {
				debug.FreeOSMemory()
			}
		}
	}
}

func (t *sessionTracker) close() { t.stop.Do(func() { close(t.stopped) }) }
