//go:build unix

package expr

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) this test process has used so far: what an evaluation
// costs, which other processes' load on the machine does not stretch as it does wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
