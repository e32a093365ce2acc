package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func decodeOut(t *testing.T, out []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("output is not JSON: %s", out)
	}
	return m
}

func TestDispatchRecoversPanics(t *testing.T) {
	t.Parallel()
	out, rc := dispatch(0, nil, func(uint64, []byte) (any, error) { panic("boom") })
	m := decodeOut(t, out)
	if rc != rcInternal || m["code"] != "internal" || !strings.Contains(m["message"].(string), "boom") {
		t.Fatalf("%d %s", rc, out)
	}
	stack := m["details"].(map[string]any)["stack"].(string)
	if !strings.Contains(stack, "TestDispatchRecoversPanics") {
		t.Fatalf("stack lacks the panicking frame: %s", stack)
	}
	// A nil-map write panics at run time: recovered the same way.
	out, rc = dispatch(0, nil, func(uint64, []byte) (any, error) {
		var m map[string]int
		//lint:ignore SA5000 the write panics on purpose: dispatch must recover it
		m["x"] = 1
		return nil, nil
	})
	if rc != rcInternal {
		t.Fatalf("%d %s", rc, out)
	}
}

func TestDispatchErrorsAndUnencodableResults(t *testing.T) {
	t.Parallel()
	out, rc := dispatch(0, nil, func(uint64, []byte) (any, error) { return nil, errors.New("plain") })
	if m := decodeOut(t, out); rc != rcError || m["code"] != "internal" || m["message"] != "plain" {
		t.Fatalf("%d %s", rc, out)
	}
	out, rc = dispatch(0, nil, func(uint64, []byte) (any, error) { return func() {}, nil })
	if m := decodeOut(t, out); rc != rcInternal || m["code"] != "internal" {
		t.Fatalf("%d %s", rc, out)
	}
}

func TestSpecParseOp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		rc       int32
		code     string
		inOut    string
	}{
		{"ok", `{"text": "name: n\nsteps: [{id: a, tool: t}]", "source": "a.yaml"}`, rcOK, "", `"spec_hash":"`},
		{"semantic problems still parse", `{"text": "steps: [{id: a, tool: t, depends_on: [a]}]"}`, rcOK, "", `"code":"cycle"`},
		{"structural problems fail", `{"text": "steps: [{id: a, tol: t}]"}`, rcError, "validation_failed", `did you mean`},
		{"malformed yaml", `{"text": "steps: [\n"}`, rcError, "parse_error", `malformed YAML`},
		{"json format enforced", `{"text": "steps: []", "format": "json"}`, rcError, "parse_error", `malformed JSON`},
		{"empty text", `{"text": ""}`, rcError, "not_a_mapping", `empty`},
		{"missing text", `{}`, rcBadRequest, "invalid_request", `"text"`},
		{"null request", `null`, rcBadRequest, "invalid_request", `"text"`},
		{"unknown request field", `{"text": "x", "fromat": "yaml"}`, rcBadRequest, "invalid_request", `unknown field`},
		{"bad format", `{"text": "x", "format": "toml"}`, rcBadRequest, "invalid_request", `"format"`},
		{"wrong type", `{"text": 5}`, rcBadRequest, "invalid_request", `invalid request JSON`},
		{"trailing data", `{"text": "x"} {}`, rcBadRequest, "invalid_request", `unexpected data`},
		{"not json", `steps: []`, rcBadRequest, "invalid_request", `invalid request JSON`},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, rc := dispatch(0, []byte(tc.in), opSpecParse)
			if rc != tc.rc {
				t.Fatalf("rc %d, want %d: %s", rc, tc.rc, out)
			}
			m := decodeOut(t, out)
			if tc.code != "" && m["code"] != tc.code {
				t.Fatalf("code %v, want %s: %s", m["code"], tc.code, out)
			}
			if !strings.Contains(string(out), tc.inOut) && !strings.Contains(fmt.Sprint(m["message"]), tc.inOut) {
				t.Fatalf("%s does not contain %s", out, tc.inOut)
			}
		})
	}
}

func TestValidationEnvelopeNamesFirstProblem(t *testing.T) {
	t.Parallel()
	out, rc := dispatch(0, []byte(`{"text": "steps:\n  - id: a\n    tool: t\n  - id: b\n    tool: t\n    retry: {max_attempts: 0}\n    timeout_secs: 0\n"}`), opSpecValidate)
	m := decodeOut(t, out)
	if rc != rcError || m["code"] != "validation_failed" || m["step_id"] != "b" || m["line"] != float64(6) {
		t.Fatalf("%d %s", rc, out)
	}
	problems := m["details"].(map[string]any)["problems"].([]any)
	if len(problems) != 2 {
		t.Fatalf("problems %v", problems)
	}
	out, rc = dispatch(0, []byte(`{"text": "steps: [{id: a, tool: t, retry: {max_attempts: 2, jitter: 3}}]"}`), opSpecValidate)
	if m := decodeOut(t, out); rc != rcOK || m["valid"] != true || !strings.Contains(string(out), "jitter_clamped") {
		t.Fatalf("%d %s", rc, out)
	}
}

// Spec and schedule problems reach the envelope through one branch (spec.ProblemError): the
// code, the first problem's position and every problem, wrapped or not.
func TestScheduleValidationEnvelope(t *testing.T) {
	t.Parallel()
	text := "schedules:\n  - id: a\n    workflow: w\n    max_concurent: 2\n    trigger: {kind: interval, every: 5}\n"
	req, _ := json.Marshal(map[string]string{"text": text, "source": "x.schedules.yaml"})
	out, rc := dispatch(0, req, opSchedulesParse)
	m := decodeOut(t, out)
	if rc != rcError || m["code"] != "validation_failed" || m["line"] != float64(4) || m["column"] != float64(5) || m["step_id"] != nil {
		t.Fatalf("%d %s", rc, out)
	}
	problems := m["details"].(map[string]any)["problems"].([]any)
	if len(problems) != 2 {
		t.Fatalf("problems %v", problems)
	}
	first := problems[0].(map[string]any)
	want := map[string]any{"code": "unknown_field", "severity": "error", "file": "x.schedules.yaml", "schedule_id": "a",
		"path": "schedules[0].max_concurent", "line": float64(4), "column": float64(5), "hint": `did you mean "max_concurrent"?`,
		"message": `schedule "a": unknown field "max_concurent"; did you mean "max_concurrent"?`}
	if fmt.Sprint(first) != fmt.Sprint(want) {
		t.Fatalf("first problem\n got %v\nwant %v", first, want)
	}
	if p := problems[1].(map[string]any); p["code"] != "invalid_interval" || p["line"] != float64(5) {
		t.Fatalf("second problem %v", p)
	}
	// Wrapped errors of either kind give the same envelope as unwrapped ones.
	_, err := opSpecParse(0, []byte(`{"text": "steps: [{id: a, tol: t}]"}`))
	if env := errorEnvelope(fmt.Errorf("loading: %w", err)); env.Code != "validation_failed" || env.StepID != "a" || env.Line != 1 || env.Column != 9 ||
		len(env.Details["problems"].([]spec.Problem)) != 2 {
		t.Fatalf("wrapped spec error: %+v", env)
	}
	_, err = opSchedulesParse(0, req)
	if env := errorEnvelope(fmt.Errorf("loading: %w", err)); env.Code != "validation_failed" || env.Line != 4 || len(env.Details["problems"].([]spec.Problem)) != 2 {
		t.Fatalf("wrapped schedule error: %+v", env)
	}
}

func TestHugeRequestRefused(t *testing.T) {
	t.Parallel()
	big := make([]byte, maxRequestSize+1)
	out, rc := dispatch(0, big, opSpecParse)
	if m := decodeOut(t, out); rc != rcError || m["code"] != "too_large" {
		t.Fatalf("%d %s", rc, out)
	}
}

// TestHeaderMatchesExports keeps capi/dccflow.h in step with the //export directives (both are
// generated from capi/internal/gen/table.go; this checks the files as they are).
func TestHeaderMatchesExports(t *testing.T) {
	t.Parallel()
	header, err := os.ReadFile("dccflow.h")
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`(?m)^\w+(?: \w+)?\s*\*?\s*(dccflow_\w+)\(`).FindAllStringSubmatch(string(header), -1)
	var inHeader []string
	for _, m := range declared {
		inHeader = append(inHeader, m[1])
	}
	// The //export directives of every Go file of the package (exports_gen.go has them all).
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^//export (\w+)`).FindAllStringSubmatch(string(src), -1) {
			exported = append(exported, m[1])
		}
	}
	sort.Strings(inHeader)
	sort.Strings(exported)
	if strings.Join(inHeader, ",") != strings.Join(exported, ",") || len(exported) == 0 {
		t.Fatalf("header declares %v, the Go files export %v", inHeader, exported)
	}
	if !strings.Contains(string(header), fmt.Sprintf("#define DCCFLOW_ABI_VERSION %d\n", abiVersion)) {
		t.Fatal("header ABI version differs from abiVersion")
	}
}
