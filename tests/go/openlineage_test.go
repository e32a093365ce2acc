package gotest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// OpenLineage events of the attempts that read or wrote files (docs/guide/openlineage.md).

// lineageReceiver is an OpenLineage endpoint on 127.0.0.1 keeping the events POSTed to it.
// hold, when not nil, makes every request wait until it is closed (or the client gives up).
type lineageReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []map[string]any
	auth   []string
	hold   chan struct{}
	got    chan struct{} // one value per request, never blocking
}

func newLineageReceiver(t *testing.T, hold chan struct{}) *lineageReceiver {
	t.Helper()
	r := &lineageReceiver{hold: hold, got: make(chan struct{}, 1000)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		r.mu.Unlock()
		select {
		case r.got <- struct{}{}:
		default:
		}
		if r.hold != nil {
			select {
			case <-r.hold:
			case <-req.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusCreated)
	})}}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *lineageReceiver) url() string { return r.srv.URL + "/api/v1/lineage" }

func (r *lineageReceiver) all() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.events...)
}

// lineageSpec: assemble reads two layers (declared) and writes the shot (reported by its tool);
// plain touches no file; broken reads the shot and fails.
func lineageSpec(dir string) string {
	return fmt.Sprintf(`
name: shot
steps:
  - id: assemble
    tool: usd__assemble
    args:
      layers: [%q, %q]
      out: %q
    reads: ["%s/assets/*.usda"]
  - id: plain
    tool: flow__echo
    args: {message: hi}
    depends_on: [assemble]
  - id: broken
    tool: usd__broken
    reads: [%q]
    depends_on: [plain]
`, filepath.Join(dir, "assets", "chair.usda"), filepath.Join(dir, "assets", "table.usda"),
		filepath.Join(dir, "sh010.usda"), filepath.ToSlash(dir), filepath.Join(dir, "sh010.usda")) // a YAML "…" string: no backslashes
}

// lineageSetup writes the layers and registers the tools of lineageSpec.
func lineageSetup(t *testing.T, b *testBundle, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "#usda 1.0\ndef \"chair\" {}\n")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "#usda 1.0\ndef \"table\" {}\n")
	assembleTool(t, b, nil)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "usd__broken", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	b.serve(flowtype.LaneMain, func(c flowtype.PendingCall) flowtype.ToolResult {
		return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: "RuntimeError: no camera named shotCam",
			Trace: "Traceback (most recent call last):\n  File \"tools.py\", line 41, in broken\nRuntimeError: no camera named shotCam\n"}}
	})
}

func closeEngine(t *testing.T, b *testBundle) time.Duration {
	t.Helper()
	start := time.Now()
	if err := b.eng.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return time.Since(start)
}

// get follows a dotted path ("run.facets.errorMessage.message"; numbers index lists).
func get(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			v = c[p]
		case []any:
			var i int
			if _, err := fmt.Sscan(p, &i); err != nil || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
}

func names(list any) []string {
	var out []string
	for _, d := range list.([]any) {
		out = append(out, d.(map[string]any)["name"].(string))
	}
	sort.Strings(out)
	return out
}

// checkLineageEvents checks the four events of one run of lineageSpec in dir.
func checkLineageEvents(t *testing.T, info *engine.RunInfo, hashes map[string]string, dir string, events []map[string]any) {
	t.Helper()
	byJob := map[string][]map[string]any{}
	for _, ev := range events {
		name, _ := get(ev, "job.name").(string)
		byJob[name] = append(byJob[name], ev)
	}
	if len(events) != 4 || len(byJob["shot.assemble"]) != 2 || len(byJob["shot.broken"]) != 2 {
		t.Fatalf("%d events (want START and COMPLETE of shot.assemble, START and FAIL of shot.broken; none of shot.plain, which touches no file):\n%v", len(events), events)
	}
	// Dataset names are paths in OpenLineage's form: a Windows drive path with forward slashes.
	chair, table, shot := filepath.ToSlash(filepath.Join(dir, "assets", "chair.usda")), filepath.ToSlash(filepath.Join(dir, "assets", "table.usda")), filepath.ToSlash(filepath.Join(dir, "sh010.usda"))
	byName := map[string]string{}
	for p, h := range hashes {
		byName[filepath.ToSlash(p)] = h
	}
	hashes = byName
	for job, want := range map[string]struct {
		end         string
		inputs      []string
		outputs     []string
		errorPrefix string
	}{
		"shot.assemble": {"COMPLETE", []string{chair, table}, []string{shot}, ""},
		"shot.broken":   {"FAIL", []string{shot}, nil, "RuntimeError: no camera named shotCam"},
	} {
		evs := byJob[job]
		if get(evs[0], "eventType") != "START" || get(evs[1], "eventType") != want.end {
			t.Errorf("%s: %v then %v, want START then %s", job, get(evs[0], "eventType"), get(evs[1], "eventType"), want.end)
		}
		if a, c := get(evs[0], "run.runId"), get(evs[1], "run.runId"); a != c || a == nil {
			t.Errorf("%s: runIds %v and %v differ", job, a, c)
		}
		for _, ev := range evs {
			if got := names(ev["inputs"]); strings.Join(got, ",") != strings.Join(want.inputs, ",") {
				t.Errorf("%s %v inputs %v, want %v", job, ev["eventType"], got, want.inputs)
			}
			var outs []string
			if want.outputs != nil {
				outs = want.outputs
			}
			if got := names(ev["outputs"]); strings.Join(got, ",") != strings.Join(outs, ",") {
				t.Errorf("%s %v outputs %v, want %v", job, ev["eventType"], got, outs)
			}
			for _, side := range []string{"inputs", "outputs"} {
				for _, d := range ev[side].([]any) {
					dm := d.(map[string]any)
					if v := get(dm, "facets.version.datasetVersion"); v != hashes[dm["name"].(string)] || v == "" {
						t.Errorf("%s %s %v: version %v, recorded hash %q", job, side, dm["name"], v, hashes[dm["name"].(string)])
					}
					if dm["namespace"] != "file" {
						t.Errorf("%s: dataset namespace %v", job, dm["namespace"])
					}
				}
			}
			if get(ev, "job.namespace") != "studio-test" || get(ev, "run.facets.dccFlow_attempt.runId") != info.ID ||
				get(ev, "run.facets.dccFlow_attempt.attempt") != 1.0 || get(ev, "run.facets.dccFlow_attempt.environment.dcc") != "usd" {
				t.Errorf("%s: namespace, run id, attempt or environment: %v", job, ev)
			}
		}
		msg, _ := get(evs[1], "run.facets.errorMessage.message").(string)
		switch {
		case want.errorPrefix == "" && get(evs[1], "run.facets.errorMessage") != nil:
			t.Errorf("%s: an errorMessage on %s", job, want.end)
		case want.errorPrefix != "" && (!strings.HasPrefix(msg, want.errorPrefix) || get(evs[1], "run.facets.errorMessage.programmingLanguage") != "python"):
			t.Errorf("%s: errorMessage %v", job, get(evs[1], "run.facets.errorMessage"))
		}
	}
}

// recordedHashes are the hashes the run recorded of its files, by path (read before the engine
// closes).
func recordedHashes(t *testing.T, b *testBundle, info *engine.RunInfo) map[string]string {
	t.Helper()
	hashes := map[string]string{}
	for _, key := range []string{"assemble", "broken"} {
		for _, f := range attemptFiles(t, b, info.ID, key) {
			hashes[f.Path] = f.Hash
		}
	}
	return hashes
}

func lineageConfig(ol *engine.OpenLineageConfig) setupOpt {
	return withConfig(func(c *engine.Config) {
		c.OpenLineage = ol
		c.Env = json.RawMessage(`{"dcc":"usd","version":"25.11"}`)
	})
}

func TestOpenLineageEventsOverHTTP(t *testing.T) {
	t.Parallel()
	rec := newLineageReceiver(t, nil)
	dir := t.TempDir()
	b := setup(t, lineageConfig(&engine.OpenLineageConfig{URL: rec.url(), Namespace: "studio-test", APIKeyEnv: "DCCFLOW_TEST_OL_KEY"}),
		withOptions(engine.WithEnviron(func() []string { return []string{"DCCFLOW_TEST_OL_KEY=k-123"} })))
	lineageSetup(t, b, dir)
	info := b.run(lineageSpec(dir), nil)
	if info.Status != run.StatusFailed {
		t.Fatalf("run %s, want failed (broken fails)", info.Status)
	}
	hashes := recordedHashes(t, b, info)
	// The metric counts what the emitter counts.
	h, err := b.eng.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	b.waitFor("4 events delivered", func() bool { return b.eng.OpenLineageStats().Delivered == 4 })
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	mustContain(t, "metrics", w.Body.String(), `dccflow_openlineage_events_total{outcome="delivered"} 4`,
		`dccflow_openlineage_events_total{outcome="dropped"} 0`, `dccflow_openlineage_events_total{outcome="failed"} 0`)
	closeEngine(t, b) // flushes the queue
	checkLineageEvents(t, info, hashes, dir, rec.all())
	for _, a := range rec.auth {
		if a != "Bearer k-123" {
			t.Errorf("Authorization %q", a)
		}
	}
	if s := b.eng.OpenLineageStats(); !s.Enabled || s.Delivered != 4 || s.Dropped != 0 || s.Failed != 0 || s.LastError != "" {
		t.Errorf("stats %+v", s)
	}
}

func TestOpenLineageEventsToAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lineage.jsonl")
	b := setup(t, lineageConfig(&engine.OpenLineageConfig{File: path, Namespace: "studio-test"}))
	lineageSetup(t, b, dir)
	info := b.run(lineageSpec(dir), nil)
	hashes := recordedHashes(t, b, info)
	closeEngine(t, b)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var events []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		events = append(events, ev)
	}
	checkLineageEvents(t, info, hashes, dir, events)
}

// A cache hit makes no attempt: no event.
func TestOpenLineageNoEventsForACacheHit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lineage.jsonl")
	writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "a")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "b")
	b := setup(t, lineageConfig(&engine.OpenLineageConfig{File: path}))
	assembleTool(t, b, nil)
	for i := range 2 {
		if info := b.run(assembleSpec(dir, "true"), nil); info.Status != run.StatusCompleted {
			t.Fatalf("run %d: %s", i, info.Status)
		}
	}
	closeEngine(t, b)
	data, _ := os.ReadFile(path)
	if n := bytes.Count(data, []byte("\n")); n != 2 {
		t.Fatalf("%d events, want the START and COMPLETE of the first run only:\n%s", n, data)
	}
}

// An endpoint that never answers holds every POST: the runs complete all the same (a run that
// waited for a delivery would never end), and Close gives the queue timeout_secs, not more.
func TestOpenLineageHangingEndpointDoesNotHoldRuns(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	defer close(hold)
	rec := newLineageReceiver(t, hold)
	dir := t.TempDir()
	b := setup(t, lineageConfig(&engine.OpenLineageConfig{URL: rec.url(), TimeoutSecs: 0.3, QueueSize: 4}))
	writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "a")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "b")
	assembleTool(t, b, nil)
	const runs = 5 // 10 events, past the queue of 4: most are dropped
	for i := range runs {
		if info := b.run(assembleSpec(dir, "false"), map[string]any{"shot": fmt.Sprintf("sh%03d", i)}); info.Status != run.StatusCompleted {
			t.Fatalf("run %d: %s %+v", i, info.Status, info.Error)
		}
	}
	select {
	case <-rec.got: // the first POST reached the endpoint, which holds it
	case <-time.After(waitLimit):
		t.Fatal("no event reached the endpoint")
	}
	if took := closeEngine(t, b); took > 10*time.Second {
		t.Errorf("Close took %v with a hanging endpoint and timeout_secs 0.3", took)
	}
	s := b.eng.OpenLineageStats()
	if s.Delivered != 0 || s.Dropped+s.Failed != 2*runs || s.LastError == "" {
		t.Errorf("stats %+v: want all %d events dropped or failed, and a last error", s, 2*runs)
	}
}

// A refused connection: the run completes, Close returns within its bound, the events count
// as failed and the last error names the event.
func TestOpenLineageEndpointDownDoesNotFailRuns(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/api/v1/lineage"
	l.Close() // nothing listens there now
	dir := t.TempDir()
	b := setup(t, lineageConfig(&engine.OpenLineageConfig{URL: url, TimeoutSecs: 5}))
	writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "a")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "b")
	assembleTool(t, b, nil)
	if info := b.run(assembleSpec(dir, "false"), nil); info.Status != run.StatusCompleted {
		t.Fatalf("run: %s %+v", info.Status, info.Error)
	}
	if took := closeEngine(t, b); took > 15*time.Second {
		t.Errorf("Close took %v", took)
	}
	s := b.eng.OpenLineageStats()
	if s.Delivered != 0 || s.Failed != 2 || !strings.Contains(s.LastError, "shot.assemble attempt 1") {
		t.Errorf("stats %+v", s)
	}
}

func TestOpenLineageConfigIsChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		ol   engine.OpenLineageConfig
		env  []string
		want string
	}{
		{engine.OpenLineageConfig{}, nil, "openlineage: neither url nor file is set"},
		{engine.OpenLineageConfig{URL: "ftp://marquez/api"}, nil, `openlineage.url: url "ftp://marquez/api" has scheme "ftp": use http:// or https://`},
		{engine.OpenLineageConfig{File: filepath.Join(dir, "no", "such", "l.jsonl")}, nil, "openlineage.file: the folder of"},
		{engine.OpenLineageConfig{File: dir}, nil, "openlineage.file: " + fmt.Sprintf("%q", dir) + " is not a regular file"},
		{engine.OpenLineageConfig{File: "x.jsonl", Namespace: " "}, nil, "openlineage.namespace: is blank"},
		{engine.OpenLineageConfig{File: "x.jsonl", APIKeyEnv: "KEY"}, nil, "openlineage.api_key_env: is set without url"},
		{engine.OpenLineageConfig{URL: "http://127.0.0.1:1/", APIKeyEnv: "1KEY"}, nil, `openlineage.api_key_env: "1KEY" is not an environment variable name`},
		{engine.OpenLineageConfig{URL: "http://127.0.0.1:1/", APIKeyEnv: "OL_KEY"}, []string{"OTHER=1"}, "openlineage.api_key_env: the environment variable OL_KEY is not set or empty"},
		{engine.OpenLineageConfig{File: "x.jsonl", TimeoutSecs: -1}, nil, "openlineage.timeout_secs: must be 0 (the default, 5) or 0.01 to 3600 seconds; got -1"},
		{engine.OpenLineageConfig{File: "x.jsonl", QueueSize: 2_000_000}, nil, "openlineage.queue_size: must be 0 (the default, 1,000) or 1 to 1,000,000 events; got 2000000"},
		{engine.OpenLineageConfig{File: "x.jsonl", Producer: "dcc-flow"}, nil, `openlineage.producer: producer "dcc-flow" is not an absolute URI`},
	} {
		env := c.env
		eng, err := engine.Open(context.Background(), engine.Config{OpenLineage: &c.ol},
			engine.WithEnviron(func() []string { return env }))
		if err == nil {
			_ = eng.Close(context.Background())
			t.Errorf("%+v: opened", c.ol)
			continue
		}
		if codeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v (code %s), want %q", c.ol, err, codeOf(err), c.want)
		}
	}
}

// An attempt the run's stop interrupts sends nothing (it did not end completed or failed).
func TestOpenLineageNoEventsForAnAttemptTheRunStopped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lineage.jsonl")
	writeFile(t, filepath.Join(dir, "assets", "chair.usda"), "a")
	writeFile(t, filepath.Join(dir, "assets", "table.usda"), "b")
	b := setup(t, lineageConfig(&engine.OpenLineageConfig{File: path}))
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "usd__hold", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	b.serve(flowtype.LaneWorker, func(flowtype.PendingCall) flowtype.ToolResult {
		close(entered)
		<-release // then answers, writing nothing (the test's folder may be gone)
		return output("late")
	})
	id := b.submit(fmt.Sprintf(`
name: hold
steps:
  - id: hold
    tool: usd__hold
    reads: [%q]
`, filepath.Join(dir, "assets", "chair.usda")), nil)
	select {
	case <-entered:
	case <-time.After(waitLimit):
		t.Fatal("the tool was not called")
	}
	if err := b.eng.Cancel(b.ctx, id, "stop"); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCancelled {
		t.Fatalf("run %s", info.Status)
	}
	closeEngine(t, b)
	if data, _ := os.ReadFile(path); len(data) != 0 {
		t.Fatalf("events for a stopped attempt:\n%s", data)
	}
}

// A key whose value would end the Authorization header is refused, naming the variable, never
// the value.
func TestRedteamOpenLineageAPIKeyWithALineBreak(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"sekrit\r\nX-Evil: 1", "sekrit\n", "sek\x00rit"} {
		env := []string{"OL_KEY=" + v}
		_, err := engine.Open(context.Background(), engine.Config{OpenLineage: &engine.OpenLineageConfig{URL: "http://127.0.0.1:1/api/v1/lineage", APIKeyEnv: "OL_KEY"}},
			engine.WithEnviron(func() []string { return env }))
		if err == nil || codeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "openlineage.api_key_env: the value of OL_KEY contains a line break") {
			t.Fatalf("%q: %v", v, err)
		}
		if strings.Contains(err.Error(), "sek") {
			t.Fatalf("the key is in the message: %v", err)
		}
	}
}

// Every ended attempt is one OpenLineage run: a step that fails twice and then completes sends
// START/FAIL, START/FAIL, START/COMPLETE, each pair with its own runId and attempt number.
func TestOpenLineageOneRunPerAttempt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "lineage.jsonl")
	in := filepath.Join(dir, "in.txt")
	writeFile(t, in, "x")
	b := setup(t, lineageConfig(&engine.OpenLineageConfig{File: path}))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "flaky", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := 0
	b.serve(flowtype.LaneWorker, func(flowtype.PendingCall) flowtype.ToolResult {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n < 3 {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: fmt.Sprintf("try %d failed", n)}}
		}
		return output("ok")
	})
	info := b.run(fmt.Sprintf(`
name: flaky
steps:
  - id: f
    tool: flaky
    reads: [%q]
    retry: {max_attempts: 3, backoff: fixed, initial_delay_ms: 1}
`, in), nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("run %s %+v", info.Status, info.Error)
	}
	closeEngine(t, b)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	runIDs := map[float64]string{}
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var ev map[string]any
		mustUnmarshal(t, line, &ev)
		n := get(ev, "run.facets.dccFlow_attempt.attempt").(float64)
		got = append(got, fmt.Sprintf("%v %v %v", n, ev["eventType"], get(ev, "run.facets.errorMessage.message")))
		id := get(ev, "run.runId").(string)
		if prev, ok := runIDs[n]; ok && prev != id {
			t.Errorf("attempt %v: runIds %s and %s", n, prev, id)
		}
		runIDs[n] = id
	}
	want := []string{"1 START <nil>", "1 FAIL try 1 failed", "2 START <nil>", "2 FAIL try 2 failed", "3 START <nil>", "3 COMPLETE <nil>"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(runIDs) != 3 || runIDs[1] == runIDs[2] || runIDs[2] == runIDs[3] {
		t.Errorf("runIds %v", runIDs)
	}
}
