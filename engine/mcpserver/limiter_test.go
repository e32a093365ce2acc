package mcpserver_test

import (
	"testing"
	"time"
)

// The rate limiter's bucket of a session goes with the session: a long-running server whose
// clients come and go (each HTTP client ends its session with DELETE) keeps none of them.
func TestRateLimiterForgetsEndedSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	if _, isErr := call(t, b.c, "workflows_run", map[string]any{"workflow": "gated", "inputs": map[string]any{"shot": "a"}}, nil); isErr {
		t.Fatal("workflows_run failed")
	}
	if n := b.srv.RateLimitedSessions(); n != 1 {
		t.Fatalf("%d sessions have a bucket after one workflows_run, want 1", n)
	}
	if err := b.c.Close(); err != nil { // DELETE /mcp: the server unregisters the session
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); b.srv.RateLimitedSessions() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the ended session's bucket is still held (%d)", b.srv.RateLimitedSessions())
		}
	}
}
