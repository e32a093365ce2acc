//go:build unix

package gotest

import "syscall"

// peakRSSMB returns the process's peak resident set size in MB (ru_maxrss: KiB on Linux).
func peakRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Maxrss) / 1024
}
