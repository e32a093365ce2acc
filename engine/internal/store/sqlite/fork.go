package sqlite

import "sync/atomic"

// forkHookFn is told about every descriptor that holds an owner lock (held) and about its
// release (see SetForkHook).
var forkHookFn atomic.Pointer[func(fd int, held bool)]

// SetForkHook makes fn hear about the descriptors that hold owner locks: fd with held=true
// once it holds a lock, held=false just before it is closed. A lock on an open file
// description (flock, OFD) follows the descriptor into a child forked without exec, and such a
// child keeps the database locked after the owner is gone: the C library closes these
// descriptors in the child (pthread_atfork), where Go cannot run. Descriptors are close-on-exec
// already.
func SetForkHook(fn func(fd int, held bool)) { forkHookFn.Store(&fn) }

func forkHook(fd int, held bool) {
	if fn := forkHookFn.Load(); fn != nil {
		(*fn)(fd, held)
	}
}
