package ui

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// Defaults and bounds of the dashboard's sessions (docs/guide/ui.md, "Security"; docs/reference/limits.md).
const (
	// DefaultSessionIdle ends a session unused for that long (Options.SessionIdle).
	DefaultSessionIdle = 12 * time.Hour
	// DefaultSessionMax ends a session that long after its sign-in, used or not
	// (Options.SessionMax).
	DefaultSessionMax = 7 * 24 * time.Hour
	// MaxSessions bounds the sessions a dashboard keeps: a sign-in beyond it ends the session
	// used least recently. Only a sign-in with the token creates one.
	MaxSessions = 10000
)

// sessionTable is the dashboard's sessions, in memory: a sign-in adds one (random id, random
// CSRF value), sign-out removes it, and a session unused for idle or older than max is gone.
// A restart of the engine (or a new token, which needs one) ends them all. The table is keyed
// by the SHA-256 of the id, so a lookup's timing says nothing about the ids it holds.
type sessionTable struct {
	mu        sync.Mutex
	m         map[[32]byte]*session
	idle, max time.Duration
	now       func() time.Time
	limit     int // MaxSessions (tests lower it)
}

type session struct {
	created, used time.Time
	csrf          string // the value the CSRF header must carry with this session
}

func newSessionTable(idle, max time.Duration, now func() time.Time) *sessionTable {
	return &sessionTable{m: map[[32]byte]*session{}, idle: idle, max: max, now: now, limit: MaxSessions}
}

// randomText is n random bytes, URL-safe base64.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on the supported systems (it panics if so)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session and returns its id (the session cookie's value) and CSRF value.
func (t *sessionTable) create() (id, csrf string) {
	id, csrf = randomText(32), randomText(24)
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) >= t.limit {
		t.sweepLocked(now) // only when full: expired sessions also go when next used
	}
	if len(t.m) >= t.limit {
		var oldest [32]byte
		var at time.Time
		first := true
		for k, s := range t.m {
			if first || s.used.Before(at) {
				oldest, at, first = k, s.used, false
			}
		}
		delete(t.m, oldest)
	}
	t.m[sha256.Sum256([]byte(id))] = &session{created: now, used: now, csrf: csrf}
	return id, csrf
}

// use returns the CSRF value of the live session id and marks it used now; ok is false for an
// id that is unknown, revoked or expired (an expired one is removed).
func (t *sessionTable) use(id string) (csrf string, ok bool) {
	if id == "" {
		return "", false
	}
	k := sha256.Sum256([]byte(id))
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[k]
	if !ok {
		return "", false
	}
	if t.expired(s, now) {
		delete(t.m, k)
		return "", false
	}
	s.used = now
	return s.csrf, true
}

// revoke ends the session id (nothing when it is not one).
func (t *sessionTable) revoke(id string) {
	t.mu.Lock()
	delete(t.m, sha256.Sum256([]byte(id)))
	t.mu.Unlock()
}

func (t *sessionTable) expired(s *session, now time.Time) bool {
	return now.Sub(s.used) >= t.idle || now.Sub(s.created) >= t.max
}

func (t *sessionTable) sweepLocked(now time.Time) {
	for k, s := range t.m {
		if t.expired(s, now) {
			delete(t.m, k)
		}
	}
}
