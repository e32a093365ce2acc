package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// dccflow_cchar lets a Go export take a `const char *`: cgo copies this preamble into the
// header it generates (_cgo_export.h, and libdccflow.h of -buildmode=c-shared), so a parameter
// of Go type *C.dccflow_cchar is declared there as `dccflow_cchar*`, that is `const char *`,
// the type capi/dccflow.h and docs/reference/c-abi/README.md give in_json. `make lib` compiles the two headers
// together, which fails on any difference.
typedef const char dccflow_cchar;
*/
import "C"

import (
	"runtime/debug"
	"unsafe"
)

func main() {}

// cchar is C's `const char` (the element of in_json), for the Go code of the package.
type cchar = C.dccflow_cchar

// call converts the C arguments, runs op through dispatch and stores the result in *out.
//
// Neither side is copied more than needed, since a tool's output crosses here whole (tens of
// MB): op reads in_json in place, in the caller's memory, which is valid until call returns —
// so an op must not keep a slice of its input (decode copies every string and raw value it
// keeps) — and the result is copied once, into the C string the caller frees.
func call(h C.uint64_t, in *C.dccflow_cchar, out **C.char, fn op) C.int32_t {
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

// dccflow_abi_version returns the ABI version (2). Callers refuse a library whose version differs.
//
//export dccflow_abi_version
func dccflow_abi_version() C.uint32_t { return abiVersion }

// dccflow_free frees a string returned by the library. NULL is ignored.
//
//export dccflow_free
func dccflow_free(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

// dccflow_version: in {} → {"version": "0.1.0", "abi_version": 2, "go_version": "go1.26.8"}.
//
//export dccflow_version
func dccflow_version(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opVersion)
}

// dccflow_spec_parse: in {"text": "...", "format": "auto", "source": "a.yaml"} →
// {"spec": {...canonical...}, "spec_hash": "...", "warnings": [], "problems": []}.
//
//export dccflow_spec_parse
func dccflow_spec_parse(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opSpecParse)
}

// dccflow_spec_validate: in as dccflow_spec_parse → {"valid": true, "spec_hash": "...", "warnings": []},
// or the validation_failed envelope listing every problem.
//
//export dccflow_spec_validate
func dccflow_spec_validate(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opSpecValidate)
}

// The engine exports. Their requests and results are documented in docs/reference/c-abi/README.md.

//export dccflow_engine_open
func dccflow_engine_open(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opEngineOpen)
}

//export dccflow_engine_close
func dccflow_engine_close(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opEngineClose)
}

//export dccflow_tool_register
func dccflow_tool_register(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opToolRegister)
}

//export dccflow_workflow_register
func dccflow_workflow_register(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opWorkflowRegister)
}

//export dccflow_workflows_list
func dccflow_workflows_list(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opWorkflowsList)
}

//export dccflow_run_submit
func dccflow_run_submit(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunSubmit)
}

//export dccflow_run_dry
func dccflow_run_dry(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunDry)
}

//export dccflow_run_status
func dccflow_run_status(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunStatus)
}

//export dccflow_run_wait
func dccflow_run_wait(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunWait)
}

//export dccflow_run_cancel
func dccflow_run_cancel(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunCancel)
}

//export dccflow_run_pause
func dccflow_run_pause(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunPause)
}

//export dccflow_run_unpause
func dccflow_run_unpause(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunUnpause)
}

//export dccflow_run_approve
func dccflow_run_approve(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunApprove)
}

//export dccflow_runs_list
func dccflow_runs_list(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunsList)
}

//export dccflow_pools_list
func dccflow_pools_list(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opPoolsList)
}

//export dccflow_runs_prune
func dccflow_runs_prune(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunsPrune)
}

//export dccflow_calls_next
func dccflow_calls_next(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opCallsNext)
}

//export dccflow_calls_complete
func dccflow_calls_complete(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opCallsComplete)
}

// dccflow_call_cancelled: in {"call_id": 7} → {"cancelled": false}, or in {"call_ids": [7, 8]}
// → {"cancelled_ids": [8]}. Whether the step still wants a pulled call's result: true once its
// run was cancelled or its attempt timed out (the host should stop the tool), and for unknown
// or answered ids.
//
//export dccflow_call_cancelled
func dccflow_call_cancelled(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opCallCancelled)
}

// dccflow_call_report: in {"call_id": 1, "progress": {"done", "total", "message"}, "logs":
// [{"message", "fields"}]} → {"accepted": true}. What a running host tool reports about itself
// (current_call().progress and .log); false when the call is no longer running.
//
//export dccflow_call_report
func dccflow_call_report(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opCallReport)
}

// dccflow_puller_open: in {"name": "MainThread"} → {"puller": 1}. A puller is a thread that
// takes tool calls: calls_next with "puller" records it as their holder until it answers them.
// name (optional) is the thread's name, given in messages about its calls.
//
//export dccflow_puller_open
func dccflow_puller_open(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opPullerOpen)
}

// dccflow_puller_close: in {"puller": 1} → {"released": 0}. Hands back every call the puller
// holds (they are pulled again by the next puller) and closes it.
//
//export dccflow_puller_close
func dccflow_puller_close(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opPullerClose)
}

// dccflow_calls_release: in {"puller": 1, "call_ids": [7, 8]} → {"released": 2}. Hands back
// calls the puller took and will not run; ids it does not hold are skipped.
//
//export dccflow_calls_release
func dccflow_calls_release(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opCallsRelease)
}

//export dccflow_events_next
func dccflow_events_next(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opEventsNext)
}

//export dccflow_schedules_parse
func dccflow_schedules_parse(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opSchedulesParse)
}

//export dccflow_schedules_validate
func dccflow_schedules_validate(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opSchedulesValidate)
}

//export dccflow_schedule_add
func dccflow_schedule_add(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opScheduleAdd)
}

//export dccflow_schedule_remove
func dccflow_schedule_remove(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opScheduleRemove)
}

//export dccflow_schedules_list
func dccflow_schedules_list(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opSchedulesList)
}

//export dccflow_serve_start
func dccflow_serve_start(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opServeStart)
}

//export dccflow_serve_stop
func dccflow_serve_stop(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opServeStop)
}

//export dccflow_serve_status
func dccflow_serve_status(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opServeStatus)
}

//export dccflow_run_resume
func dccflow_run_resume(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRunResume)
}

//export dccflow_idempotency_purge
func dccflow_idempotency_purge(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opIdempotencyPurge)
}

//export dccflow_retention_status
func dccflow_retention_status(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opRetentionStatus)
}

//export dccflow_schedule_fires
func dccflow_schedule_fires(h C.uint64_t, in *C.dccflow_cchar, out **C.char) C.int32_t {
	return call(h, in, out, opScheduleFires)
}
