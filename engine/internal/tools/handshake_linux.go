//go:build linux

package tools

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// handshakes is true where wakeWord sleeps in the kernel (a futex): the handshake of a
// sequential host step (handshakeLocked, Pull's busy spin) is used only there.
const handshakes = true

// The futex operations of a word private to this process.
const (
	futexWaitPrivate = 128
	futexWakePrivate = 129
)

// wakeWord is a one-shot wake-up that a goroutine sleeps for in a system call, its thread
// blocked in the kernel, without the Go scheduler: the waker's futex call wakes that thread
// directly. State: 0 not set, 1 set, 2 a sleeper is (or is about to be) in the kernel.
type wakeWord struct{ state atomic.Uint32 }

// sleep blocks until wake is called or d elapses, and reports whether it was woken. It spins
// for the first spin of d, its thread awake: a wake then costs the waker no system call and
// the sleeper no wake-up.
func (w *wakeWord) sleep(d, spin time.Duration) bool {
	start := time.Now()
	deadline := start.Add(d)
	for i := 1; w.state.Load() == 0; i++ {
		if i%64 == 0 && time.Since(start) >= spin {
			break
		}
	}
	for {
		switch w.state.Load() {
		case 1:
			return true
		case 0:
			if !w.state.CompareAndSwap(0, 2) {
				continue // set meanwhile
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return w.state.Load() == 1
		}
		ts := syscall.NsecToTimespec(int64(left))
		// EINTR, EAGAIN (set meanwhile) and ETIMEDOUT all come back to the loop's checks.
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&w.state)), futexWaitPrivate, 2,
			uintptr(unsafe.Pointer(&ts)), 0, 0)
	}
}

// wake sets w and wakes its sleeper, if one sleeps; it costs one atomic swap when none does.
func (w *wakeWord) wake() {
	if w.state.Swap(1) == 2 {
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&w.state)), futexWakePrivate, 1, 0, 0, 0)
	}
}
