package gotest

import (
	"os"
	"testing"

	"github.com/dcc-flow/dcc-flow/internal/leakcheck"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// TestMain fails the suite if a goroutine the tests started (an engine's executor, scheduler,
// event reader, host queue, HTTP server…) is still running after them: every test closes what
// it opens, so whatever is left is a leak of the engine or of a test. It also starts the
// throwaway PostgreSQL cluster of the tests that run engines on a PostgreSQL database
// (pgtest.DB; the engine migrates each new database when it opens it).
func TestMain(m *testing.M) {
	os.Exit(pgtest.MainFunc(func() int { return leakcheck.Main(m) }, pgtest.Options{}))
}
