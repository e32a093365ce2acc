package openlineage

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// Hostile input: events and endpoints that try to make the emitter panic, block, grow without
// bound, leak a secret or break the JSON-lines file.

func TestRedteamEnvThatDoesNotEncodeIsLeftOut(t *testing.T) {
	var e errs
	path := filepath.Join(t.TempDir(), "l.jsonl")
	em, _ := New(Config{File: path, OnError: e.hook})
	for _, env := range []map[string]any{
		{"callback": func() {}},
		{"ch": make(chan int)},
		{"nan": math.NaN()},
		{"inf": map[string]any{"deep": math.Inf(1)}},
	} {
		ev := sampleEvent(Complete)
		ev.Env = env
		em.Emit(ev)
	}
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 4 {
		t.Fatalf("%d lines, want the 4 events sent without their environment", len(lines))
	}
	for _, l := range lines {
		ev := validateEvent(t, l)
		if _, ok := ev["run"].(map[string]any)["facets"].(map[string]any)["dccFlow_attempt"].(map[string]any)["environment"]; ok {
			t.Errorf("an environment that does not encode was sent: %s", l)
		}
	}
	if l := e.all(); len(l) != 4 || !strings.Contains(l[0], "does not encode as JSON") || !strings.Contains(l[0], "sent without it") {
		t.Errorf("errors %q", l)
	}
}

func TestRedteamHugeEnvIsLeftOut(t *testing.T) {
	ev := sampleEvent(Start)
	ev.Env = map[string]any{"blob": strings.Repeat("x", MaxEnvBytes)}
	data, warning, err := Marshal(Config{}, ev)
	if err != nil || warning == nil || !strings.Contains(warning.Error(), fmt.Sprintf("over %d", MaxEnvBytes)) {
		t.Fatalf("warning %v, err %v", warning, err)
	}
	if len(data) > 16<<10 {
		t.Errorf("event is %d bytes", len(data))
	}
	validateEvent(t, data)
}

func TestRedteamHundredThousandFilesAreCapped(t *testing.T) {
	ev := sampleEvent(Complete)
	ev.Inputs, ev.Outputs = nil, nil
	for i := range 100_000 {
		ev.Inputs = append(ev.Inputs, Dataset{Path: fmt.Sprintf("/mnt/show/plates/f%06d.exr", i), Hash: "blake3:" + strings.Repeat("0", 64), Size: 1})
	}
	ev.Outputs = ev.Inputs[:MaxDatasets+5]
	data := mustMarshal(t, Config{}, ev)
	if len(data) > 4<<20 {
		t.Errorf("event is %d bytes", len(data))
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	att := got["run"].(map[string]any)["facets"].(map[string]any)["dccFlow_attempt"].(map[string]any)
	if n := len(got["inputs"].([]any)); n != MaxDatasets || att["inputsOmitted"] != float64(100_000-MaxDatasets) {
		t.Errorf("%d inputs, %v omitted", n, att["inputsOmitted"])
	}
	if n := len(got["outputs"].([]any)); n != MaxDatasets || att["outputsOmitted"] != 5.0 {
		t.Errorf("%d outputs, %v omitted", n, att["outputsOmitted"])
	}
	// The schema check of every facet of 4,000 datasets takes seconds under -race: check the
	// event with its first datasets (all alike).
	got["inputs"], got["outputs"] = got["inputs"].([]any)[:3], got["outputs"].([]any)[:3]
	small, _ := json.Marshal(got)
	validateEvent(t, small)
}

func TestRedteamHostilePathsKeepOneEventPerLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.jsonl")
	var e errs
	em, _ := New(Config{File: path, QueueSize: 2, OnError: e.hook})
	ev := sampleEvent(Complete)
	ev.StepKey = "step\n{\"eventType\":\"FAKE\"}\n"
	ev.Workflow = "wf\u2028\u2029\x00"
	ev.Inputs = []Dataset{
		{Path: "/mnt/a\nb.usd"},
		{Path: "/mnt/\xff\xfe.usd"}, // not UTF-8
		{Path: "/mnt/\x00nul"},
		{Path: "/" + strings.Repeat("d/", 20000)},
		{Path: `\\`}, {Path: `\\host`}, {Path: `\\?\UNC\host\share`}, {Path: "C:"},
	}
	ev.ErrorMessage = "\r\n\x1b[31mred\x1b[0m"
	em.Emit(ev)
	ev.Type = Fail
	em.Emit(ev)
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	em.Emit(ev) // after Close: dropped, and reported on one line
	for _, msg := range e.all() {
		if strings.ContainsAny(msg, "\n\r\x00") {
			t.Errorf("a message breaks the log line: %q", msg)
		}
	}
	if len(e.all()) != 1 {
		t.Errorf("errors %q", e.all())
	}
	lines := readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	for _, l := range lines {
		if !utf8.Valid(l) {
			t.Errorf("line is not UTF-8")
		}
		got := validateEvent(t, l)
		if got["eventType"] == "FAKE" {
			t.Error("the step key injected an event")
		}
	}
}

func TestRedteamHugeErrorIsCut(t *testing.T) {
	ev := sampleEvent(Fail)
	ev.ErrorMessage = strings.Repeat("é", 5<<20) // 10 MB, 2-byte runes: the cut must not split one
	ev.ErrorTrace = strings.Repeat("Traceback (most recent call last)\n", 300_000)
	data := mustMarshal(t, Config{}, ev)
	if len(data) > 3*MaxErrorBytes {
		t.Fatalf("event is %d bytes", len(data))
	}
	got := validateEvent(t, data)
	em := got["run"].(map[string]any)["facets"].(map[string]any)["errorMessage"].(map[string]any)
	msg := em["message"].(string)
	if !strings.HasSuffix(msg, " bytes cut]") || strings.ContainsRune(msg, utf8.RuneError) {
		t.Errorf("message ends %q", msg[len(msg)-40:])
	}
}

func TestRedteamPanickingOnErrorHookIsContained(t *testing.T) {
	rec := newRecorder(t)
	rec.status = func(int) int { return http.StatusInternalServerError }
	calls := 0
	var mu sync.Mutex
	em, _ := newEmitter(Config{URL: rec.url(), QueueSize: 1, OnError: func(error) {
		mu.Lock()
		calls++
		mu.Unlock()
		panic("hook bug")
	}}, 0, time.Millisecond)
	for range 5 { // some are dropped (the hook panics in Emit), some fail (it panics in the loop)
		em.Emit(sampleEvent(Complete))
	}
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if total := em.Dropped() + em.Failed() + em.Delivered(); total != 5 || calls != 5 {
		t.Errorf("dropped %d failed %d delivered %d, hook called %d times; want 5 accounted for and 5 calls", em.Dropped(), em.Failed(), em.Delivered(), calls)
	}
}

func TestRedteamServerWithAHugeErrorBodyIsQuotedShort(t *testing.T) {
	rec := newRecorder(t)
	rec.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		chunk := []byte(strings.Repeat("\xffA\n", 1<<12))
		for range 2000 { // 24 MB, not UTF-8, many lines
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	var e errs
	em, _ := newEmitter(Config{URL: rec.url(), OnError: e.hook}, 0, time.Millisecond)
	em.Emit(sampleEvent(Complete))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	l := e.all()
	if len(l) != 1 || len(l[0]) > 1024 || !utf8.ValidString(l[0]) || !strings.Contains(l[0], "HTTP 400") {
		t.Fatalf("errors (%d): %.300q", len(l), l)
	}
}

func TestRedteamURLPasswordStaysOutOfMessages(t *testing.T) {
	rec := newRecorder(t)
	rec.status = func(int) int { return http.StatusServiceUnavailable }
	var e errs
	u := strings.Replace(rec.url(), "http://", "http://pipeline:hunter2@", 1)
	em, err := newEmitter(Config{URL: u, APIKey: "s3cr3t-key", OnError: e.hook}, 1, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(sampleEvent(Complete))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	l := e.all()
	if len(l) != 1 || strings.Contains(l[0], "hunter2") || strings.Contains(l[0], "s3cr3t") || !strings.Contains(l[0], "pipeline:xxxxx@") {
		t.Errorf("errors %q", l)
	}
	if err := (Config{URL: "ftp://pipeline:hunter2@host/x"}).Validate(); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Validate: %v", err)
	}
}

func TestRedteamEmitRacingCloseNeverPanics(t *testing.T) {
	rec := newRecorder(t)
	path := filepath.Join(t.TempDir(), "l.jsonl")
	em, _ := New(Config{URL: rec.url(), File: path, QueueSize: 8})
	const writers, each = 8, 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				ev := sampleEvent(Complete)
				ev.Attempt = w*each + i + 1
				em.Emit(ev)
			}
		}()
	}
	close(start)
	if err := closeWithin(t, em, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if total := em.Dropped() + em.Failed() + em.Delivered(); total != writers*each {
		t.Errorf("dropped %d failed %d delivered %d: %d accounted for, want %d", em.Dropped(), em.Failed(), em.Delivered(), total, writers*each)
	}
	if n := int64(len(readLines(t, path))); n != em.Delivered() {
		t.Errorf("%d lines, %d delivered", n, em.Delivered())
	}
}

func TestRedteamFileThatBecomesUnwritableIsReportedNotFatal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "l.jsonl")
	var e errs
	em, _ := New(Config{File: path, OnError: e.hook})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil { // something else took the name (a directory: unwritable even for root)
		t.Fatal(err)
	}
	em.Emit(sampleEvent(Start))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if l := e.all(); len(l) != 1 || !strings.Contains(l[0], "not written to "+path) || em.Failed() != 1 {
		t.Errorf("failed %d, errors %q", em.Failed(), l)
	}
}

func TestRedteamEventStaysJSON(t *testing.T) {
	// A Dataset size below zero (a corrupt record) must not make the statistics facets invalid.
	ev := sampleEvent(Complete)
	ev.Inputs = []Dataset{{Path: "/a", Hash: "blake3:x", Size: -5}}
	got := validateEvent(t, mustMarshal(t, Config{}, ev))
	b, _ := json.Marshal(got["inputs"])
	if !strings.Contains(string(b), `"size":0`) {
		t.Errorf("inputs %s", b)
	}
}
