package schedule

import (
	"os"
	"testing"

	"github.com/dcc-flow/dcc-flow/internal/leakcheck"
)

// TestMain fails the package if a scheduler loop goroutine outlives the tests (every test
// stops its Scheduler in a cleanup).
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Main(m, leakcheck.Only("schedule.(*Scheduler).loop(")))
}
