//go:build !unix

package gotest

import "time"

// cpuTime is -1 where getrusage is missing (Windows): the benchmarks report CPU as unknown.
func cpuTime() time.Duration { return -1 }
