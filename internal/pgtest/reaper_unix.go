//go:build unix

package pgtest

import "syscall"

// reaperAttr puts the reaper in a process group of its own.
func reaperAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
