//go:build !unix

package expr

import "time"

var processStart = time.Now()

// cpuTime falls back to the wall time since the test process started where getrusage is missing
// (Windows): the bound then holds on an idle machine only.
func cpuTime() time.Duration { return time.Since(processStart) }
