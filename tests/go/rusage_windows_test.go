//go:build windows

package gotest

// peakRSSMB is -1 on Windows (no getrusage; the benchmarks report it as unknown): the
// benchmarks are measured on Linux (docs/design/performance.md).
func peakRSSMB() float64 { return -1 }
