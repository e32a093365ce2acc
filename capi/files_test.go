package main

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// completeBothWays decodes in as calls_complete does, as it is (under 64 KiB: json.Decoder)
// and padded with 64 KiB of spaces after its "{" (in place): both results, or it fails.
func completeBothWays(t *testing.T, in string) [2]completeRequest {
	t.Helper()
	var out [2]completeRequest
	for i, text := range []string{in, "{" + strings.Repeat(" ", 64<<10) + in[1:]} {
		if err := out[i].decodeRequest([]byte(text)); err != nil {
			t.Fatalf("%d bytes of %.80s: %v", len(text), in, err)
		}
	}
	return out
}

// A completion's files and env reach the ToolResult the call is answered with, through both
// decode paths, for an output and for an error alike (a failed call's files are recorded too).
func TestCompleteRequestCarriesFilesAndEnv(t *testing.T) {
	t.Parallel()
	files := `"files": [{"path": "/shows/abc/sh010.ma", "role": "read"}, {"path": "/out/sh010.fbx", "role": "write"},
		{"path": "/shows/abc/sh010.ma", "role": "read"}]`
	env := `"env": {"dcc": "maya", "version": "2025.3", "plugins": {"mtoa": "5.4.1"}}`
	want := []flowtype.FileUse{{Path: "/shows/abc/sh010.ma", Role: "read"}, {Path: "/out/sh010.fbx", Role: "write"},
		{Path: "/shows/abc/sh010.ma", Role: "read"}}
	for _, in := range []string{
		`{"call_id": 3, "output": {"fbx": "/out/sh010.fbx"}, ` + files + `, ` + env + `}`,
		`{"call_id": 3, "error": {"kind": "transient", "message": "license busy"}, ` + files + `, ` + env + `}`,
	} {
		for i, r := range completeBothWays(t, in) {
			res := r.result()
			if !reflect.DeepEqual(res.Files, want) {
				t.Errorf("path %d of %.60s: files %+v", i, in, res.Files)
			}
			if got := string(res.Env); got != `{"dcc": "maya", "version": "2025.3", "plugins": {"mtoa": "5.4.1"}}` {
				t.Errorf("path %d of %.60s: env %s", i, in, got)
			}
			if strings.Contains(in, `"error"`) != (res.Error != nil) {
				t.Errorf("path %d of %.60s: error %+v", i, in, res.Error)
			}
		}
	}
	// Without them, or null: none.
	for _, in := range []string{`{"call_id": 3, "output": 1}`, `{"call_id": 3, "output": 1, "files": null, "env": null}`,
		`{"call_id": 3, "output": 1, "files": [], "env": null}`} {
		for i, r := range completeBothWays(t, in) {
			if res := r.result(); len(res.Files) != 0 || res.Env != nil {
				t.Errorf("path %d of %s: files %+v env %q", i, in, res.Files, res.Env)
			}
		}
	}
}

// Files and env of the wrong shape are a bad request, through both decode paths, with a
// message naming the field.
func TestRedteamCompleteRequestRefusesBadFilesAndEnv(t *testing.T) {
	t.Parallel()
	bigEnv := `{"x": "` + strings.Repeat("y", 64<<10) + `"}`
	for in, want := range map[string]string{
		`{"call_id": 1, "files": {"path": "/a", "role": "read"}}`:                      "cannot unmarshal object",
		`{"call_id": 1, "files": ["/a"]}`:                                              "cannot unmarshal string",
		`{"call_id": 1, "files": [{"path": 7, "role": "read"}]}`:                       "cannot unmarshal number",
		`{"call_id": 1, "files": [{"path": "/a", "role": "read", "x": 1}]}`:            `unknown field "x"`,
		`{"call_id": 1, "files": [{"path": "/a", "role": "wrote"}]}`:                   `files[0].role is "wrote"; it must be "read" or "write"`,
		`{"call_id": 1, "files": [{"path": "/a", "role": "read"}, {"role": "write"}]}`: "files[1].path is empty",
		`{"call_id": 1, "files": [{"path": "/a"}]}`:                                    `files[0].role is ""`,
		`{"call_id": 1, "env": ["maya"]}`:                                              `"env" must be a JSON object (dcc_flow.set_environment's keywords), not an array`,
		`{"call_id": 1, "env": "maya 2025"}`:                                           "not a string",
		`{"call_id": 1, "env": 2025}`:                                                  "not a number",
		`{"call_id": 1, "env": true}`:                                                  "not a boolean",
		`{"call_id": 1, "env": ` + bigEnv + `}`:                                        `"env" is 65545 bytes of JSON; at most 65536 (64 KiB)`,
		`{"call_id": 1, "env": {"a": 1}, "envv": {}}`:                                  `unknown field "envv"`,
	} {
		for _, large := range []bool{false, true} {
			text := in
			if large {
				text = "{" + strings.Repeat(" ", 64<<10) + in[1:]
			}
			var r completeRequest
			err := r.decodeRequest([]byte(text))
			var br *badRequest
			if !errors.As(err, &br) || !strings.Contains(br.msg, want) {
				t.Errorf("large=%v %.100s: %v, want %q", large, in, err, want)
			}
		}
	}
}

// A host tool's completion with files and env is accepted and completes its step (the engine
// records them once the attempt's files are hashed).
func TestCallsCompleteWithFilesAndEnv(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opToolRegister, `{"name": "export", "lane": "main"}`)
	runID := mustOp(t, h, opRunSubmit, `{"spec": "steps: [{id: e, tool: export}]"}`)["run_id"].(string)
	calls := mustOp(t, h, opCallsNext, fmt.Sprintf(`{"lanes": ["main"], "max": 1, "timeout_ms": 5000, "run_id": %q}`, runID))["calls"].([]any)
	if len(calls) != 1 {
		t.Fatalf("calls %v", calls)
	}
	id := calls[0].(map[string]any)["call_id"]
	out, rc := dispatch(h, []byte(fmt.Sprintf(`{"call_id": %v, "output": 1, "files": [{"path": "/a", "role": "readd"}]}`, id)), opCallsComplete)
	if rc == rcOK || !strings.Contains(string(out), `"code":"invalid_request"`) || !strings.Contains(string(out), "files[0].role") {
		t.Fatalf("a bad role: rc %d %s", rc, out)
	}
	res := mustOp(t, h, opCallsComplete, fmt.Sprintf(`{"call_id": %v, "output": {"fbx": "/out/a.fbx"},
		"files": [{"path": "/in/a.ma", "role": "read"}, {"path": "/out/a.fbx", "role": "write"}],
		"env": {"dcc": "maya", "version": "2025"}}`, id))
	if res["accepted"] != true {
		t.Fatalf("complete %v", res)
	}
	st := mustOp(t, h, opRunWait, fmt.Sprintf(`{"run_id": %q, "timeout_ms": 5000}`, runID))
	if st["status"] != "completed" || st["outputs"].(map[string]any)["e"].(map[string]any)["fbx"] != "/out/a.fbx" {
		t.Fatalf("status %v", st)
	}
}
