package schedule

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestMain fails the package if a scheduler loop goroutine outlives the tests (every test
// stops its Scheduler in a cleanup).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		for i := 0; ; i++ {
			n := loopGoroutines()
			if n == 0 {
				break
			}
			if i == 10000 {
				fmt.Fprintf(os.Stderr, "%d scheduler loop goroutines leaked\n", n)
				code = 1
				break
			}
			runtime.Gosched()
		}
	}
	os.Exit(code)
}

func loopGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "schedule.(*Scheduler).loop(")
}
