package openlineage

import (
	"os"
	"testing"

	"github.com/dcc-flow/dcc-flow/internal/leakcheck"
)

// Every goroutine the tests start (emitters' delivery goroutines, HTTP connections of their
// clients, test servers) must be gone when they end.
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }
