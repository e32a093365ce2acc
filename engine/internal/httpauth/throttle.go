// Package httpauth is what the engine's HTTP doors (the dashboard, MCP over HTTP, the metrics
// endpoint) share about their token: the strength a token needs on an address that is not
// loopback (CheckToken), and the throttle on wrong tokens per client address (Throttle).
package httpauth

import (
	"net"
	"sync"
	"time"
)

// Bounds of the throttle on wrong tokens (docs/reference/limits.md, "Dashboard").
const (
	// ThrottleFree is how many wrong tokens a client address may send before it is throttled.
	ThrottleFree = 5
	// ThrottleMaxWait is the longest a throttled client waits: after ThrottleFree wrong tokens,
	// each further one makes the client wait 1 s, 2 s, 4 s … up to this.
	ThrottleMaxWait = 60 * time.Second
	// ThrottleForget is how long after its last wrong token a client address is forgotten
	// (its count starts again from zero).
	ThrottleForget = 15 * time.Minute
	// throttleMaxClients bounds the addresses remembered; beyond it, new addresses share one
	// record (a guesser with many addresses is throttled as one client).
	throttleMaxClients = 10000
)

// Throttle slows the guessing of the token: per client address (an IPv6 address by its /64,
// which one machine commonly has whole), wrong tokens beyond ThrottleFree make the address wait
// (answers 429 with Retry-After, the token not even checked), doubling up to ThrottleMaxWait.
// Sessions already signed in are never throttled: a guesser sharing an address (the same host,
// a NAT) delays other sign-ins from it by at most ThrottleMaxWait each, and not browsers that
// are signed in.
type Throttle struct {
	mu         sync.Mutex
	m          map[string]*failures
	now        func() time.Time
	maxClients int // throttleMaxClients
}

type failures struct {
	n     int       // wrong tokens since the record started
	last  time.Time // the last wrong token
	until time.Time // throttled until then
}

// NewThrottle returns an empty throttle reading the time from now.
func NewThrottle(now func() time.Time) *Throttle {
	return &Throttle{m: map[string]*failures{}, now: now, maxClients: throttleMaxClients}
}

// ClientKey is the throttle's key of a request's remote address ("10.0.0.7:51234" → "10.0.0.7",
// an IPv6 address → its /64).
func ClientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// Wait returns how long the client must wait before its next token is checked (0: now).
func (t *Throttle) Wait(key string) time.Duration {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.get(key, now, false)
	if f == nil || !now.Before(f.until) {
		return 0
	}
	return f.until.Sub(now)
}

// Check checks a token the client sent, unless it is throttled: ok reports right (right is
// called only when wait is 0); a wrong token is recorded as Fail does. The check and the record
// of its failure are one step under the throttle's lock, so tokens sent at once from one address
// are throttled as if sent one after the other (a burst would otherwise all pass the "not
// throttled" test before the first of its failures counted). right must be quick (a
// constant-time comparison): it runs under the lock.
func (t *Throttle) Check(key string, right func() bool) (ok bool, wait time.Duration) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.get(key, now, false); f != nil && now.Before(f.until) {
		return false, f.until.Sub(now)
	}
	if right() {
		return true, 0
	}
	t.failLocked(key, now)
	return false, 0
}

// Fail records a wrong token from the client.
func (t *Throttle) Fail(key string) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(key, now)
}

func (t *Throttle) failLocked(key string, now time.Time) {
	f := t.get(key, now, true)
	f.n++
	f.last = now
	if f.n > ThrottleFree {
		d := ThrottleMaxWait
		if k := f.n - ThrottleFree - 1; k < 6 {
			d = min(time.Second<<k, ThrottleMaxWait)
		}
		f.until = now.Add(d)
	}
}

// get returns the record of key (nil when none and !create), forgetting it when stale.
func (t *Throttle) get(key string, now time.Time, create bool) *failures {
	f, ok := t.m[key]
	if ok && now.Sub(f.last) >= ThrottleForget && !now.Before(f.until) {
		delete(t.m, key)
		f, ok = nil, false
	}
	if ok {
		return f
	}
	if !create {
		if len(t.m) >= t.maxClients {
			return t.m["*"] // the address may be one of those that share the overflow record
		}
		return nil
	}
	if len(t.m) >= t.maxClients {
		for k, g := range t.m {
			if now.Sub(g.last) >= ThrottleForget && !now.Before(g.until) {
				delete(t.m, k)
			}
		}
		if len(t.m) >= t.maxClients {
			key = "*" // full of live records: new addresses share one
			if f, ok = t.m[key]; ok {
				return f
			}
		}
	}
	f = &failures{}
	t.m[key] = f
	return f
}
