//go:build !unix

package pgtest

import "syscall"

// reaperAttr: no cluster is started here (see findBin).
func reaperAttr() *syscall.SysProcAttr { return nil }
