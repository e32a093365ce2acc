package gotest

import (
	"os"
	"testing"

	"github.com/dcc-flow/dcc-flow/internal/leakcheck"
)

// TestMain fails the suite if a goroutine the tests started (an engine's executor, scheduler,
// event reader, host queue, HTTP server…) is still running after them: every test closes what
// it opens, so whatever is left is a leak of the engine or of a test.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m))
}
