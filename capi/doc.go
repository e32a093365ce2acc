// Command capi is the C ABI of dcc-flow, built with -buildmode=c-shared into libdccflow.
//
// # Contract
//
// Every export except dccflow_abi_version and dccflow_free has the shape
//
//	int32_t dccflow_x(uint64_t handle, const char *in_json, char **out_json);
//
// The caller owns in_json (NUL-terminated UTF-8 JSON; NULL means "{}"). On return *out_json is a
// NUL-terminated UTF-8 JSON document owned by the library, which the caller frees with
// dccflow_free. The return value is 0 when *out_json is the result; otherwise *out_json is an error
// envelope {"code", "message", "step_id"?, "line"?, "column"?, "details"?}: 1 for an error the
// caller can act on, 2 when in_json could not be decoded (code "invalid_request"), 3 for an
// internal error (a recovered Go panic, code "internal", with the Go stack in details.stack).
//
// Exports are safe to call from any thread, never panic across the boundary, never exit the
// process and never write to stdout or stderr. Exports only convert JSON and call the engine
// facade; no logic lives here. docs/reference/c-abi/README.md documents every export's input and output.
//
// # Generated files
//
// One table, capi/internal/gen/table.go, lists the exports with their C signatures and doc text.
// `make generate` (go generate ./capi/...) writes from it the //export wrappers (exports_gen.go),
// the tests' exportsByName (cabi_exports_gen.go), the header dccflow.h and the ctypes table of
// Python (python/dcc_flow/_ffi_table.py); a test of capi/internal/gen fails when one is stale.
package main

//go:generate go run ./internal/gen -root ..
