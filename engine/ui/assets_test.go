package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// filesRun runs a two-step chain whose files the spec declares (import: src.abc → mid.usda;
// render: mid.usda → out.exr) over files in a new directory; it returns the directory and the
// run id.
func filesRun(t *testing.T, b *bench) (string, string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"src.abc": "alembic", "mid.usda": "#usda 1.0", "out.exr": "pixels"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := spec.ParseString(fmt.Sprintf(`
name: files
steps:
  - {id: import, tool: flow__echo, args: {value: 1}, reads: [%[1]q], writes: [%[2]q]}
  - {id: render, tool: flow__echo, args: {value: 2}, reads: [%[2]q], writes: [%[3]q]}
`, filepath.Join(dir, "src.abc"), filepath.Join(dir, "mid.usda"), filepath.Join(dir, "out.exr")))
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.e.Run(context.Background(), engine.StartRequest{Spec: sp})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %v %+v", err, info)
	}
	return dir, info.ID
}

// GET /api/lineage draws how a file came to be; GET /api/stale lists what changed; a step's
// attempts carry their files (the step panel's list).
func TestLineageAndStaleRoutes(t *testing.T) {
	t.Parallel()
	b := newBench(t, ui.Options{})
	dir, id := filesRun(t, b)
	q := func(p string) string { return url.QueryEscape(p) }
	out := filepath.Join(dir, "out.exr")

	var n engine.LineageNode
	b.getJSON(t, "/api/lineage?path="+q(out), &n)
	if n.Path != out || n.Now != "unchanged" || n.Made == nil || n.Made.RunID != id || n.Made.StepKey != "render" || n.Made.Tool != "flow__echo" ||
		len(n.Made.Inputs) != 1 || n.Made.Inputs[0].Made == nil || n.Made.Inputs[0].Made.StepKey != "import" ||
		len(n.Made.Inputs[0].Made.Inputs) != 1 || n.Made.Inputs[0].Made.Inputs[0].Path != filepath.Join(dir, "src.abc") {
		t.Fatalf("lineage: %+v", n)
	}
	var cut engine.LineageNode
	b.getJSON(t, "/api/lineage?depth=1&path="+q(out), &cut)
	if in := cut.Made.Inputs[0]; !in.Cut || in.Made != nil {
		t.Fatalf("depth 1: %+v", in)
	}

	var st struct {
		Stale []engine.StaleFile `json:"stale"`
	}
	b.getJSON(t, "/api/stale?path="+q(dir), &st)
	if st.Stale == nil || len(st.Stale) != 0 {
		t.Fatalf("stale before any change: %+v", st)
	}
	if err := os.WriteFile(filepath.Join(dir, "src.abc"), []byte("alembic, edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.getJSON(t, "/api/stale?path="+q(dir), &st)
	if len(st.Stale) != 2 || st.Stale[0].Path != filepath.Join(dir, "mid.usda") || st.Stale[0].Reason != "input changed: "+filepath.Join(dir, "src.abc") ||
		st.Stale[1].Path != out || !strings.HasPrefix(st.Stale[1].Reason, "made from stale ") || st.Stale[1].RunID != id || st.Stale[1].StepKey != "render" {
		t.Fatalf("stale after src.abc changed: %+v", st.Stale)
	}
	b.getJSON(t, "/api/stale", &st) // every recorded output
	if len(st.Stale) != 2 {
		t.Fatalf("every stale output: %+v", st.Stale)
	}
	b.getJSON(t, "/api/lineage?path="+q(out), &n)
	if got := n.Made.Inputs[0].Made.Inputs[0].Now; got != "changed" {
		t.Fatalf("src.abc now %q, want changed", got)
	}

	var step struct {
		AttemptHistory []struct {
			Files []engine.FileInfo `json:"files"`
		} `json:"attempt_history"`
	}
	b.getJSON(t, "/api/runs/"+id+"/steps/render", &step)
	if len(step.AttemptHistory) != 1 || len(step.AttemptHistory[0].Files) != 2 {
		t.Fatalf("render's files: %+v", step)
	}
}

// Bad input to the file routes: 400 with a message that says what to send; an unrecorded path
// 404; a wrong method 405.
func TestLineageAndStaleRoutesRefuseBadInput(t *testing.T) {
	t.Parallel()
	b := newBench(t, ui.Options{})
	dir, _ := filesRun(t, b)
	out := url.QueryEscape(filepath.Join(dir, "out.exr"))
	many := strings.Repeat("path=%2Fa&", 101)
	for _, tc := range []struct {
		method, path string
		status       int
		code, text   string
	}{
		{"GET", "/api/lineage", 400, "invalid_input", "path is empty"},
		{"GET", "/api/lineage?path=%20", 400, "invalid_input", "path is empty"},
		{"GET", "/api/lineage?path=" + out + "&depth=0", 400, "invalid_input", "must be a whole number from 1 to 100"},
		{"GET", "/api/lineage?path=" + out + "&depth=101", 400, "invalid_input", "from 1 to 100"},
		{"GET", "/api/lineage?path=" + out + "&depth=two", 400, "invalid_input", `depth \"two\"`},
		{"GET", "/api/lineage?path=a%00b", 400, "invalid_request", "lineage: "},
		{"GET", "/api/lineage?path=" + url.QueryEscape(filepath.Join(dir, "nope.usd")), 404, "not_found", "no recorded attempt read or wrote"},
		{"GET", "/api/stale?path=", 400, "invalid_input", "path is empty"},
		{"GET", "/api/stale?" + many, 400, "invalid_input", "101 paths: give at most 100"},
		{"GET", "/api/stale?path=a%00b", 400, "invalid_request", "stale: "},
		{"POST", "/api/lineage", 405, "invalid_request", "answers GET, HEAD only"},
		{"POST", "/api/stale", 405, "invalid_request", "answers GET, HEAD only"},
	} {
		code, body, _ := b.do(t, tc.method, tc.path, nil)
		if code != tc.status || errorCode(body) != tc.code || !strings.Contains(string(body), tc.text) {
			t.Errorf("%s %.80s: %d %s; want %d %s containing %q", tc.method, tc.path, code, body, tc.status, tc.code, tc.text)
		}
	}
	_ = b.e.Close(context.Background())
	if code, body, _ := b.do(t, "GET", "/api/lineage?path="+out, nil); code != http.StatusServiceUnavailable || errorCode(body) != "closed" {
		t.Errorf("a closed engine: %d %s", code, body)
	}
}

// The file routes are behind the dashboard's rules like every API route: the token, and the
// Origin check.
func TestLineageAndStaleRoutesNeedTheToken(t *testing.T) {
	t.Parallel()
	b := newBench(t, ui.Options{Token: "s3cret"})
	b.token = ""
	for _, p := range []string{"/api/lineage?path=%2Fa", "/api/stale"} {
		if code, body, _ := b.do(t, "GET", p, nil); code != 401 || errorCode(body) != "unauthorized" {
			t.Errorf("%s without the token: %d %s", p, code, body)
		}
		if code, _, _ := b.do(t, "GET", p, nil, func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer s3cret")
			r.Header.Set("Origin", "http://evil.example")
		}); code != 403 {
			t.Errorf("%s from another site: %d", p, code)
		}
	}
}
