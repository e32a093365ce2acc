package main

// The hand-written side of the exports. The //export wrappers themselves, one per function of
// capi/dccflow.h, are generated from capi/internal/gen/table.go into exports_gen.go (`make
// generate`); each calls the code here: call for a JSON export, freeString for dccflow_free.

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"runtime/debug"
	"unsafe"
)

func main() {}

// call converts the C arguments, runs op through dispatch and stores the result in *out.
//
// Neither side is copied more than needed, since a tool's output crosses here whole (tens of
// MB): op reads in_json in place, in the caller's memory, which is valid until call returns —
// so an op must not keep a slice of its input (decode copies every string and raw value it
// keeps) — and the result is copied once, into the C string the caller frees.
func call(h C.uint64_t, in *cchar, out **C.char, fn op) C.int32_t {
	var input []byte
	if in != nil {
		if n := C.strlen((*C.char)(in)); n > 0 {
			input = unsafe.Slice((*byte)(unsafe.Pointer(in)), int(n))
		}
	}
	res, rc := dispatch(uint64(h), input, fn)
	if out != nil {
		*out = cString(res)
	}
	if len(res) >= releaseAbove || len(input) >= releaseAbove {
		// Building a large answer (a run's outputs) or reading a large request (a tool's
		// output) left garbage several times its size; give it back to the OS now, before the
		// host builds its own copies, rather than when the Go runtime gets round to it.
		res = nil
		debug.FreeOSMemory()
	}
	return C.int32_t(rc)
}

// releaseAbove is the size of a request or answer after which call returns the garbage to the OS.
// FreeOSMemory is a full collection (about a millisecond per 10 MB of live heap), small next to
// the cost of a crossing this size.
const releaseAbove = 16 << 20

// cString copies b into a new NUL-terminated C string, to be freed with dccflow_free.
func cString(b []byte) *C.char {
	p := C.malloc(C.size_t(len(b) + 1))
	buf := unsafe.Slice((*byte)(p), len(b)+1)
	copy(buf, b)
	buf[len(b)] = 0
	return (*C.char)(p)
}

// freeString frees a string returned by the library (dccflow_free). nil is ignored.
func freeString(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}
