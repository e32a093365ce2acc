package ui

import (
	"testing"
	"time"
)

// The session table keeps at most its limit: a sign-in beyond it ends the session used least
// recently, not a live one chosen at random, and never grows the table.
func TestRedteamSessionTableIsBounded(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	tb := newSessionTable(time.Hour, 24*time.Hour, func() time.Time { return now })
	tb.limit = 3
	var ids []string
	for range 3 {
		id, _ := tb.create()
		ids = append(ids, id)
		now = now.Add(time.Second)
	}
	if _, ok := tb.use(ids[0]); !ok { // ids[0] is now the most recently used
		t.Fatal("a live session is unknown")
	}
	now = now.Add(time.Second)
	extra, _ := tb.create()
	if len(tb.m) != 3 {
		t.Fatalf("%d sessions kept, limit 3", len(tb.m))
	}
	if _, ok := tb.use(ids[1]); ok {
		t.Error("the session used least recently survived a sign-in beyond the limit")
	}
	for _, id := range []string{ids[0], ids[2], extra} {
		if _, ok := tb.use(id); !ok {
			t.Error("a sign-in beyond the limit ended a session used more recently")
		}
	}
}
