package httpauth

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Addresses are remembered up to a bound: beyond it, new addresses share one record, so a
// guesser with many addresses is throttled as one client and memory stays bounded; an IPv6
// address counts by its /64.
func TestRedteamThrottleIsBoundedAndCountsIPv6ByPrefix(t *testing.T) {
	if a, b := ClientKey("[2001:db8:1:2::5]:1"), ClientKey("[2001:db8:1:2:ffff::9]:2"); a != b {
		t.Errorf("two addresses of one /64: keys %q and %q", a, b)
	}
	if ClientKey("10.0.0.1:1") == ClientKey("10.0.0.2:1") {
		t.Error("two IPv4 addresses share a key")
	}
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	th := NewThrottle(func() time.Time { return now })
	th.maxClients = 4
	for i := range 100 {
		th.Fail(ClientKey(fmt.Sprintf("198.51.100.%d:1", i)))
	}
	if len(th.m) > 5 {
		t.Fatalf("%d records for a bound of 4 (+1 shared)", len(th.m))
	}
	if th.Wait(ClientKey("203.0.113.200:1")) == 0 {
		t.Error("a new address while the table is full of guessers is not throttled with them")
	}
	now = now.Add(ThrottleForget + ThrottleMaxWait)
	if d := th.Wait(ClientKey("203.0.113.200:1")); d != 0 {
		t.Errorf("after %s without a wrong token: still waiting %s", ThrottleForget, d)
	}
}

// A weak token is refused off loopback with a message naming the door and the fix.
func TestRedteamCheckTokenRefusesWeakTokens(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"", " ", "\n", "a", "aaaaaaaaaaaaaaaaaaaa", "short-token", "abc\x01defghijklmnopq"} {
		err := CheckToken("MCP", "0.0.0.0:8765", tok)
		if err == nil {
			t.Errorf("token %q accepted", tok)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "MCP on 0.0.0.0:8765") || !strings.Contains(msg, "secrets.token_urlsafe") {
			t.Errorf("message %q does not name the door, the address and the fix", msg)
		}
	}
	if err := CheckToken("MCP", "0.0.0.0:8765", "rT7-q9vXk2LmZ0pWs4Ya"); err != nil {
		t.Error(err)
	}
}

// Wrong bearer headers from one address are throttled; the right one from another is not;
// a request without a header counts nothing.
func TestRedteamBearerIsThrottled(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	th := NewThrottle(func() time.Time { return now })
	req := func(addr, header string) (bool, time.Duration) {
		r := httptest.NewRequest("GET", "/mcp", nil)
		r.RemoteAddr = addr
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		return th.Bearer(r, "the-right-token-123")
	}
	for range 3 * ThrottleFree {
		if ok, _ := req("192.0.2.1:1", ""); ok {
			t.Fatal("no header is ok")
		}
	}
	waited := false
	for range ThrottleFree + 1 {
		if _, d := req("192.0.2.1:1", "Bearer guess"); d > 0 {
			waited = true
		}
	}
	if _, d := req("192.0.2.1:1", "Bearer the-right-token-123"); d <= 0 || !waited && d <= 0 {
		t.Fatalf("the right token from a throttled address: wait %s, want > 0", d)
	}
	if ok, d := req("192.0.2.2:1", "Bearer the-right-token-123"); !ok || d != 0 {
		t.Fatalf("the right token from another address: ok %v, wait %s", ok, d)
	}
	if got := RetryAfter(1500 * time.Millisecond); got != "2" {
		t.Errorf("RetryAfter(1.5s) = %s", got)
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.9.9.9": true, "::1": true,
		"": false, "0.0.0.0": false, "10.0.0.1": false, "example.com": false, "localhost.example.com": false} {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v; want %v", host, got, want)
		}
	}
}
