package ui

import (
	"fmt"
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

// Addresses are remembered up to a bound: beyond it, new addresses share one record, so a
// guesser with many addresses is throttled as one client and memory stays bounded; an IPv6
// address counts by its /64.
func TestRedteamThrottleIsBoundedAndCountsIPv6ByPrefix(t *testing.T) {
	if a, b := clientKey("[2001:db8:1:2::5]:1"), clientKey("[2001:db8:1:2:ffff::9]:2"); a != b {
		t.Errorf("two addresses of one /64: keys %q and %q", a, b)
	}
	if clientKey("10.0.0.1:1") == clientKey("10.0.0.2:1") {
		t.Error("two IPv4 addresses share a key")
	}
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	th := newThrottle(func() time.Time { return now })
	th.maxClients = 4
	for i := range 100 {
		th.fail(clientKey(fmt.Sprintf("198.51.100.%d:1", i)))
	}
	if len(th.m) > 5 {
		t.Fatalf("%d records for a bound of 4 (+1 shared)", len(th.m))
	}
	if th.wait(clientKey("203.0.113.200:1")) == 0 {
		t.Error("a new address while the table is full of guessers is not throttled with them")
	}
	now = now.Add(ThrottleForget + ThrottleMaxWait)
	if d := th.wait(clientKey("203.0.113.200:1")); d != 0 {
		t.Errorf("after %s without a wrong token: still waiting %s", ThrottleForget, d)
	}
}
