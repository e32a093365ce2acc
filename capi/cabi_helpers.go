//go:build dccflow_cabitest

package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import "unsafe"

// This file is compiled only with -tags dccflow_cabitest. It lets tests (which cannot use cgo)
// call the real exports through C strings, the way a C caller does, and free the results with
// dccflow_free.

// exportFunc is the shape of every JSON export.
type exportFunc func(C.uint64_t, *cchar, **C.char) C.int32_t

var exportsByName = map[string]exportFunc{
	"dccflow_version":            dccflow_version,
	"dccflow_spec_parse":         dccflow_spec_parse,
	"dccflow_spec_validate":      dccflow_spec_validate,
	"dccflow_engine_open":        dccflow_engine_open,
	"dccflow_engine_close":       dccflow_engine_close,
	"dccflow_tool_register":      dccflow_tool_register,
	"dccflow_workflow_register":  dccflow_workflow_register,
	"dccflow_workflows_list":     dccflow_workflows_list,
	"dccflow_run_submit":         dccflow_run_submit,
	"dccflow_run_dry":            dccflow_run_dry,
	"dccflow_run_status":         dccflow_run_status,
	"dccflow_run_wait":           dccflow_run_wait,
	"dccflow_run_cancel":         dccflow_run_cancel,
	"dccflow_run_approve":        dccflow_run_approve,
	"dccflow_run_pause":          dccflow_run_pause,
	"dccflow_run_unpause":        dccflow_run_unpause,
	"dccflow_run_resume":         dccflow_run_resume,
	"dccflow_runs_list":          dccflow_runs_list,
	"dccflow_pools_list":         dccflow_pools_list,
	"dccflow_runs_prune":         dccflow_runs_prune,
	"dccflow_calls_next":         dccflow_calls_next,
	"dccflow_calls_complete":     dccflow_calls_complete,
	"dccflow_call_cancelled":     dccflow_call_cancelled,
	"dccflow_call_report":        dccflow_call_report,
	"dccflow_puller_open":        dccflow_puller_open,
	"dccflow_puller_close":       dccflow_puller_close,
	"dccflow_calls_release":      dccflow_calls_release,
	"dccflow_events_next":        dccflow_events_next,
	"dccflow_schedules_parse":    dccflow_schedules_parse,
	"dccflow_schedules_validate": dccflow_schedules_validate,
	"dccflow_schedule_add":       dccflow_schedule_add,
	"dccflow_schedule_remove":    dccflow_schedule_remove,
	"dccflow_schedules_list":     dccflow_schedules_list,
	"dccflow_serve_start":        dccflow_serve_start,
	"dccflow_serve_stop":         dccflow_serve_stop,
	"dccflow_serve_status":       dccflow_serve_status,
	"dccflow_idempotency_purge":  dccflow_idempotency_purge,
	"dccflow_retention_status":   dccflow_retention_status,
	"dccflow_schedule_fires":     dccflow_schedule_fires,
}

// callExport calls the named export with in (nil means a NULL in_json) and returns the return
// code and the output string (nil out pointer when passNilOut).
func callExport(name string, handle uint64, in *string, passNilOut bool) (int32, string) {
	fn := exportsByName[name]
	var cin *cchar
	if in != nil {
		p := C.CString(*in)
		defer C.free(unsafe.Pointer(p))
		cin = (*cchar)(unsafe.Pointer(p))
	}
	if passNilOut {
		return int32(fn(C.uint64_t(handle), cin, nil)), ""
	}
	var out *C.char
	rc := fn(C.uint64_t(handle), cin, &out)
	s := C.GoString(out)
	dccflow_free(out)
	return int32(rc), s
}

func abiVersionExport() uint32 { return uint32(dccflow_abi_version()) }

func freeNil() { dccflow_free(nil) }
