package main

// The C ABI of dcc-flow, once: every export of libdccflow with its C signature and its doc text.
// It is the one source of four files (`make generate` writes them; TestGeneratedFilesAreCurrent
// fails when one is stale):
//
//   - capi/exports_gen.go: the //export wrappers, each calling the hand-written Go code of capi
//     (call and the op of a JSON export; see capi/exports.go);
//   - capi/cabi_exports_gen.go: exportsByName, the JSON exports by name for the tests (tag
//     dccflow_cabitest);
//   - capi/dccflow.h: the header shipped to C hosts (`make lib` checks it against the header cgo
//     writes from the wrappers, scripts/check_header.sh);
//   - python/dcc_flow/_ffi_table.py: the ctypes signatures _ffi configures the exports with.
//
// Adding an export: add it to a group below (a JSON export with jsonExport, after writing its op
// in capi), run `make generate`, document its request and answer in docs/reference/c-abi/README.md. Names are
// lower case letters and underscores (scripts/check_header.sh and scripts/wheels/test.sh find
// them with `dccflow_[a-z_]+`). Changing the signature of an existing export, or removing one,
// breaks C hosts: raise abiVersion.

// abiVersion is DCCFLOW_ABI_VERSION: what dccflow_abi_version returns, and what the Python
// package refuses a library without.
const abiVersion = 2

// headerDoc is the comment at the top of capi/dccflow.h, one entry a line.
var headerDoc = []string{
	"dccflow.h — the C ABI of dcc-flow (libdccflow). See docs/reference/c-abi/README.md.",
	"",
	"Every function except dccflow_abi_version and dccflow_free takes an engine handle (0 when none is",
	"needed), a NUL-terminated UTF-8 JSON request owned by the caller (NULL means \"{}\"), and stores in",
	"*out_json a NUL-terminated UTF-8 JSON document owned by the library, to be released with",
	"dccflow_free. Return value: 0 = ok (*out_json is the result); 1 = error (*out_json is",
	"{\"code\",\"message\",...}); 2 = the request JSON was invalid; 3 = internal error (recovered panic).",
	"All functions are thread-safe.",
}

// groups are the exports in the order of capi/dccflow.h, each group after a blank line and its
// comment (when it has one).
var groups = []group{
	{Exports: []export{
		{
			Name: "dccflow_abi_version", Ret: cUint32, Body: "abiVersion",
			Doc: []string{"dccflow_abi_version returns the ABI version (2). Callers refuse a library whose version differs."},
		},
		{
			Name: "dccflow_free", Ret: cVoid, Params: []param{{C: "p", Go: "p", Type: cCharPtr}}, Body: "freeString(p)",
			Doc: []string{"dccflow_free frees a string returned by the library. NULL is ignored."},
		},
	}},
	{Exports: []export{
		jsonExport("dccflow_version",
			`dccflow_version: in {} → {"version": "0.1.0", "abi_version": 2, "go_version": "go1.26.8"}.`),
		jsonExport("dccflow_spec_parse",
			`dccflow_spec_parse: in {"text": "...", "format": "auto", "source": "a.yaml"} →`,
			`{"spec": {...canonical...}, "spec_hash": "...", "warnings": [], "problems": []}.`),
		jsonExport("dccflow_spec_validate",
			`dccflow_spec_validate: in as dccflow_spec_parse → {"valid": true, "spec_hash": "...", "warnings": []},`,
			`or the validation_failed envelope listing every problem.`),
	}},
	{
		Comment: []string{`Engines: open returns {"handle": n}; every other call takes that handle.`},
		Exports: []export{
			jsonExport("dccflow_engine_open"),
			jsonExport("dccflow_engine_close"),
			jsonExport("dccflow_tool_register"),
			jsonExport("dccflow_workflow_register"),
			jsonExport("dccflow_workflows_list"),
			jsonExport("dccflow_run_submit"),
			jsonExport("dccflow_run_dry"),
			jsonExport("dccflow_run_status"),
			jsonExport("dccflow_run_wait"),
			jsonExport("dccflow_run_cancel"),
			jsonExport("dccflow_run_approve"),
			jsonExport("dccflow_run_pause"),
			jsonExport("dccflow_run_unpause"),
			jsonExport("dccflow_run_resume"),
			jsonExport("dccflow_runs_list"),
			jsonExport("dccflow_pools_list"),
			jsonExport("dccflow_runs_prune"),
			jsonExport("dccflow_calls_next"),
			jsonExport("dccflow_calls_complete"),
			jsonExport("dccflow_calls_complete_many",
				`dccflow_calls_complete_many: in {"answers": [{"call_id": 7, "output": 1}, ...], "next": {...}}`,
				`→ {"accepted": [true], "calls": [...]}. Answers several calls (each as calls_complete, without`,
				`"next") and pulls the next ones in one crossing.`),
			jsonExport("dccflow_call_cancelled",
				`dccflow_call_cancelled: in {"call_id": 7} → {"cancelled": false}, or in {"call_ids": [7, 8]}`,
				`→ {"cancelled_ids": [8]}. Whether the step still wants a pulled call's result: true once its`,
				`run was cancelled or its attempt timed out (the host should stop the tool), and for unknown`,
				`or answered ids.`),
			jsonExport("dccflow_call_report",
				`dccflow_call_report: in {"call_id": 1, "progress": {"done", "total", "message"}, "logs":`,
				`[{"message", "fields"}]} → {"accepted": true}. What a running host tool reports about itself`,
				`(current_call().progress and .log); false when the call is no longer running.`),
			jsonExport("dccflow_puller_open",
				`dccflow_puller_open: in {"name": "MainThread"} → {"puller": 1}. A puller is a thread that`,
				`takes tool calls: calls_next with "puller" records it as their holder until it answers them.`,
				`name (optional) is the thread's name, given in messages about its calls.`),
			jsonExport("dccflow_puller_close",
				`dccflow_puller_close: in {"puller": 1} → {"released": 0}. Hands back every call the puller`,
				`holds (they are pulled again by the next puller) and closes it.`),
			jsonExport("dccflow_calls_release",
				`dccflow_calls_release: in {"puller": 1, "call_ids": [7, 8]} → {"released": 2}. Hands back`,
				`calls the puller took and will not run; ids it does not hold are skipped.`),
			jsonExport("dccflow_events_next"),
		},
	},
	{
		Comment: []string{"Schedules (handle 0): parse a schedules file, validate a list of schedules."},
		Exports: []export{
			jsonExport("dccflow_schedules_parse"),
			jsonExport("dccflow_schedules_validate"),
		},
	},
	{
		Comment: []string{"An engine's schedules and servers (scheduler, webhooks)."},
		Exports: []export{
			jsonExport("dccflow_schedule_add"),
			jsonExport("dccflow_schedule_remove"),
			jsonExport("dccflow_schedules_list"),
			jsonExport("dccflow_serve_start"),
			jsonExport("dccflow_serve_stop"),
			jsonExport("dccflow_serve_status"),
		},
	},
	{
		Comment: []string{
			"Retention and history: purge expired idempotency entries, the retention serve applies, the",
			"fire history of schedules (dccflow_runs_prune, above, deletes ended runs).",
		},
		Exports: []export{
			jsonExport("dccflow_idempotency_purge"),
			jsonExport("dccflow_retention_status"),
			jsonExport("dccflow_schedule_fires"),
		},
	},
	{
		Comment: []string{"Assets: the files steps read and wrote (docs/guide/assets.md)."},
		Exports: []export{
			jsonExport("dccflow_file_lineage",
				`dccflow_file_lineage: in {"path": "/show/sh010.usda", "depth": 10} → {"lineage": {"path",`,
				`"hash", "now", "made": {"run_id", "step_key", "attempt", "tool", "args", "env", "inputs": [...]}}}.`),
			jsonExport("dccflow_files_stale",
				`dccflow_files_stale: in {"paths": ["/show/sh010"]} → {"stale": [{"path", "reason", "run_id",`,
				`"step_key", "attempt"}]}: the recorded outputs that are stale, by path.`),
			jsonExport("dccflow_cache_list",
				`dccflow_cache_list: in {"tool", "workflow", "run_id", "key", "before", "limit"} (each optional) →`,
				`{"entries": [{"key", "tool", "step_id", "workflow", "run_id", "step_key", "attempt", "parts",`,
				`"created_at", "expires_at"}]}, newest first.`),
			jsonExport("dccflow_cache_purge",
				`dccflow_cache_purge: in the filter of dccflow_cache_list (no limit) → {"purged": 3}.`),
		},
	},
	{
		Comment: []string{"Scarce resources (docs/guide/resources.md)."},
		Exports: []export{
			jsonExport("dccflow_resources",
				`dccflow_resources: in {} → {"resources": [{"name", "limit", "in_use", "holders": [...], "queue": [...]}]}:`,
				`the engine's declared resources, who holds their units and who waits for them.`),
		},
	},
}
