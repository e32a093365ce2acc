//go:build unix

package main

/*
#include <pthread.h>
#include <unistd.h>

// The descriptors holding owner locks of databases (flock on <db>.lock, an OFD byte lock on the
// database): a child forked without exec inherits them, and with them the locks, which then
// outlive the owner. The at-fork child handler closes them in the child (close is
// async-signal-safe; the child's copies go, the parent keeps its locks).
#define DCCFLOW_LOCK_FDS 64
static int dccflow_lock_fds[DCCFLOW_LOCK_FDS];
static pthread_once_t dccflow_fork_once = PTHREAD_ONCE_INIT;

static void dccflow_close_lock_fds(void) {
	for (int i = 0; i < DCCFLOW_LOCK_FDS; i++) {
		int fd = __atomic_load_n(&dccflow_lock_fds[i], __ATOMIC_SEQ_CST);
		if (fd > 0) {
			close(fd);
			dccflow_lock_fds[i] = 0;
		}
	}
}

static void dccflow_install_fork_handler(void) { pthread_atfork(NULL, NULL, dccflow_close_lock_fds); }

// dccflow_lock_fd adds (held) or removes a descriptor; 0 when there is no free slot.
static int dccflow_lock_fd(int fd, int held) {
	pthread_once(&dccflow_fork_once, dccflow_install_fork_handler);
	for (int i = 0; i < DCCFLOW_LOCK_FDS; i++) {
		int want = held ? 0 : fd, cur = want;
		if (__atomic_compare_exchange_n(&dccflow_lock_fds[i], &cur, held ? fd : 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			return 1;
		}
	}
	return 0;
}
*/
import "C"

import "github.com/dcc-flow/dcc-flow/engine"

func init() {
	engine.SetForkHook(func(fd int, held bool) {
		h := C.int(0)
		if held {
			h = 1
		}
		C.dccflow_lock_fd(C.int(fd), h)
	})
}
