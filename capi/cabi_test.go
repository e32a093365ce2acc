//go:build dccflow_cabitest

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestExportsThroughCStrings(t *testing.T) {
	t.Parallel()
	if v := abiVersionExport(); v != abiVersion {
		t.Fatalf("abi version %d", v)
	}
	freeNil() // must be a no-op

	rc, out := callExport("dccflow_version", 0, nil, false)
	if rc != rcOK || !strings.Contains(out, `"abi_version":2`) {
		t.Fatalf("version: %d %s", rc, out)
	}
	in := `{"text": "steps: [{id: a, tool: t}]"}`
	rc, out = callExport("dccflow_spec_parse", 0, &in, false)
	if rc != rcOK {
		t.Fatalf("parse: %d %s", rc, out)
	}
	var res struct {
		Spec     map[string]any `json:"spec"`
		SpecHash string         `json:"spec_hash"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.SpecHash) != 64 {
		t.Fatalf("parse result %s: %v", out, err)
	}
	bad := `{"text": "steps: [{id: a, tol: t}]"}`
	rc, out = callExport("dccflow_spec_validate", 0, &bad, false)
	if rc != rcError || !strings.Contains(out, `"code":"validation_failed"`) {
		t.Fatalf("validate: %d %s", rc, out)
	}
	notJSON := `{"text": `
	rc, out = callExport("dccflow_spec_parse", 0, &notJSON, false)
	if rc != rcBadRequest || !strings.Contains(out, `"code":"invalid_request"`) {
		t.Fatalf("bad request: %d %s", rc, out)
	}
	// A NULL out pointer is tolerated.
	if rc, _ := callExport("dccflow_spec_parse", 0, &in, true); rc != rcOK {
		t.Fatalf("nil out: %d", rc)
	}
	// UTF-8 survives the crossing.
	uni := `{"text": "name: \"スキャン – été\"\nsteps: [{id: a, tool: t}]"}`
	rc, out = callExport("dccflow_spec_parse", 0, &uni, false)
	if rc != rcOK || !strings.Contains(out, "スキャン – été") {
		t.Fatalf("utf-8: %d %s", rc, out)
	}
}
