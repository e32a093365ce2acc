package openlineage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a lineage endpoint on 127.0.0.1 that keeps what it is sent. status, when set,
// picks each answer (n counts requests from 1); hold, when set, makes requests wait for it
// (or for the client to go away).
type recorder struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	ctypes []string
	auths  []string
	status func(n int) int
	hold   chan struct{}
	got    chan struct{} // receives one value per request, without blocking
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{got: make(chan struct{}, 10000)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.srv = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(r.serve)}}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.ctypes = append(r.ctypes, req.Header.Get("Content-Type"))
	r.auths = append(r.auths, req.Header.Get("Authorization"))
	n := len(r.bodies)
	status, hold := r.status, r.hold
	r.mu.Unlock()
	r.got <- struct{}{}
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return
		}
	}
	code := http.StatusCreated
	if status != nil {
		code = status(n)
	}
	w.WriteHeader(code)
}

func (r *recorder) requests() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...)
}

func (r *recorder) url() string { return r.srv.URL + "/api/v1/lineage" }

// errs collects what OnError is told.
type errs struct {
	mu   sync.Mutex
	list []string
}

func (e *errs) hook(err error) {
	e.mu.Lock()
	e.list = append(e.list, err.Error())
	e.mu.Unlock()
}

func (e *errs) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

func closeWithin(t *testing.T, em *Emitter, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return em.Close(ctx)
}

// noDeliveryGoroutine fails t if an Emitter's delivery goroutine, or a client connection of
// its HTTP transport, is still running (the test servers are still up: their side of a
// connection does not end it). A connection's goroutines end just after Close closed it, so
// this waits up to 5 s for them.
func noDeliveryGoroutine(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		s := string(buf)
		// The loop closes done in a deferred call, so Close may return while the loop's
		// goroutine is still on its way out: poll for it as for the client connections.
		loop := strings.Contains(s, "openlineage.(*Emitter).loop")
		conn := strings.Contains(s, "net/http.(*persistConn)")
		if !loop && !conn {
			return
		}
		if time.Now().After(deadline) {
			if loop {
				t.Fatalf("a delivery goroutine is left after Close:\n%s", s)
			}
			t.Fatalf("a client connection is left open after Close:\n%s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHTTPStartThenCompleteShareTheRunID(t *testing.T) {
	rec := newRecorder(t)
	var e errs
	em, err := New(Config{URL: rec.url(), OnError: e.hook})
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(sampleEvent(Start))
	em.Emit(sampleEvent(Complete))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	noDeliveryGoroutine(t)
	got := rec.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	start, complete := validateEvent(t, got[0]), validateEvent(t, got[1])
	if start["eventType"] != "START" || complete["eventType"] != "COMPLETE" {
		t.Fatalf("order: %v then %v", start["eventType"], complete["eventType"])
	}
	if a, b := start["run"].(map[string]any)["runId"], complete["run"].(map[string]any)["runId"]; a != b {
		t.Fatalf("runIds differ: %v, %v", a, b)
	}
	if rec.ctypes[0] != "application/json" {
		t.Errorf("Content-Type %q", rec.ctypes[0])
	}
	if em.Delivered() != 2 || em.Failed() != 0 || em.Dropped() != 0 || len(e.all()) != 0 {
		t.Errorf("delivered %d failed %d dropped %d errors %v", em.Delivered(), em.Failed(), em.Dropped(), e.all())
	}
}

func TestHTTPSendsTheAPIKey(t *testing.T) {
	rec := newRecorder(t)
	em, err := New(Config{URL: rec.url(), APIKey: "k-123"})
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(sampleEvent(Start))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(rec.auths) != 1 || rec.auths[0] != "Bearer k-123" {
		t.Errorf("Authorization %q", rec.auths)
	}
}

func TestHTTPRetriesOn503ThenSucceeds(t *testing.T) {
	rec := newRecorder(t)
	rec.status = func(n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}
	var e errs
	em, err := newEmitter(Config{URL: rec.url(), OnError: e.hook}, 3, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(sampleEvent(Complete))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	noDeliveryGoroutine(t)
	got := rec.requests()
	if len(got) != 3 || string(got[0]) != string(got[2]) {
		t.Fatalf("%d requests (want 3, the same event each time)", len(got))
	}
	if em.Delivered() != 1 || em.Failed() != 0 || len(e.all()) != 0 {
		t.Errorf("delivered %d failed %d errors %v", em.Delivered(), em.Failed(), e.all())
	}
}

func TestHTTPGivesUpAfterTheRetries(t *testing.T) {
	rec := newRecorder(t)
	rec.status = func(int) int { return http.StatusBadGateway }
	var e errs
	em, _ := newEmitter(Config{URL: rec.url(), OnError: e.hook}, 2, time.Millisecond)
	em.Emit(sampleEvent(Complete))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.requests()); n != 3 {
		t.Fatalf("%d requests, want 3 (1 + 2 retries)", n)
	}
	if em.Failed() != 1 || em.Delivered() != 0 {
		t.Errorf("failed %d delivered %d", em.Failed(), em.Delivered())
	}
	want := "openlineage: COMPLETE event of shot_publish.per_shot[2].render attempt 2 (run r-20261129-0001) not sent to " + rec.url() + " after 3 tries: HTTP 502 Bad Gateway"
	if l := e.all(); len(l) != 1 || l[0] != want {
		t.Errorf("errors %q\nwant %q", l, want)
	}
}

func TestHTTPDoesNotRetryA400(t *testing.T) {
	rec := newRecorder(t)
	rec.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.serve(httptest.NewRecorder(), r)
		http.Error(w, `{"error":"runId must be a UUID"}`, http.StatusBadRequest)
	})
	var e errs
	em, _ := newEmitter(Config{URL: rec.url(), OnError: e.hook}, 3, time.Millisecond)
	em.Emit(sampleEvent(Complete))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	if l := e.all(); len(l) != 1 || !strings.Contains(l[0], `after 1 try: HTTP 400 Bad Request: {"error":"runId must be a UUID"}`) {
		t.Errorf("errors %q", l)
	}
}

func TestHTTPConnectionRefusedIsRetriedThenReported(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	var e errs
	em, _ := newEmitter(Config{URL: "http://" + addr + "/api/v1/lineage", OnError: e.hook}, 2, time.Millisecond)
	em.Emit(sampleEvent(Start))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if l := e.all(); len(l) != 1 || !strings.Contains(l[0], "after 3 tries") || !strings.Contains(l[0], "refused") {
		t.Errorf("errors %q", l)
	}
	if em.Failed() != 1 {
		t.Errorf("failed %d", em.Failed())
	}
}

func TestHTTPHangingServerTimesOut(t *testing.T) {
	rec := newRecorder(t)
	rec.hold = make(chan struct{}) // never released: every request waits until the client gives up
	var e errs
	em, _ := newEmitter(Config{URL: rec.url(), Timeout: 100 * time.Millisecond, OnError: e.hook}, 1, time.Millisecond)
	begin := time.Now()
	em.Emit(sampleEvent(Complete))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("took %v for 2 tries of 100 ms", d)
	}
	if n := len(rec.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
	if l := e.all(); len(l) != 1 || !strings.Contains(l[0], "after 2 tries: no answer within 100ms (timeout)") {
		t.Errorf("errors %q", l)
	}
	noDeliveryGoroutine(t) // and TestMain's leakcheck: no connection goroutine left either
}

func TestCloseAbandonsWhatItCannotDeliverInTime(t *testing.T) {
	rec := newRecorder(t)
	rec.hold = make(chan struct{})
	var e errs
	em, _ := newEmitter(Config{URL: rec.url(), Timeout: time.Minute, OnError: e.hook}, 3, time.Millisecond)
	for range 3 {
		em.Emit(sampleEvent(Complete))
	}
	<-rec.got // the first is in flight, the other two queued
	begin := time.Now()
	err := closeWithin(t, em, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "3 event(s) not delivered before the deadline") {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Close took %v past a 100 ms deadline", d)
	}
	if em.Failed() != 3 || em.Delivered() != 0 {
		t.Errorf("failed %d delivered %d", em.Failed(), em.Delivered())
	}
	noDeliveryGoroutine(t)
	if err := closeWithin(t, em, time.Second); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestQueueFullDropsAndCounts(t *testing.T) {
	rec := newRecorder(t)
	rec.hold = make(chan struct{})
	var e errs
	em, _ := newEmitter(Config{URL: rec.url(), QueueSize: 2, OnError: e.hook}, 0, time.Millisecond)
	em.Emit(sampleEvent(Start))
	<-rec.got // in flight: the queue is empty again
	begin := time.Now()
	for range 5 {
		em.Emit(sampleEvent(Complete)) // 2 fit, 3 do not
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("Emit blocked for %v", d)
	}
	if em.Dropped() != 3 {
		t.Errorf("dropped %d, want 3", em.Dropped())
	}
	l := e.all()
	if len(l) != 3 || !strings.Contains(l[0], "dropped: the queue is full (2 events wait): raise queue_size") {
		t.Errorf("errors %q", l)
	}
	close(rec.hold)
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if em.Delivered() != 3 || len(rec.requests()) != 3 {
		t.Errorf("delivered %d, %d requests; want 3", em.Delivered(), len(rec.requests()))
	}
}

func TestCloseFlushesTheQueue(t *testing.T) {
	rec := newRecorder(t)
	em, _ := New(Config{URL: rec.url(), QueueSize: 500})
	for i := range 200 {
		ev := sampleEvent(Complete)
		ev.Attempt = i + 1
		em.Emit(ev)
	}
	if err := closeWithin(t, em, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got := rec.requests()
	if len(got) != 200 || em.Delivered() != 200 {
		t.Fatalf("%d requests, delivered %d; want 200", len(got), em.Delivered())
	}
	for i, b := range got { // in order
		var ev struct {
			Run struct {
				Facets struct {
					Attempt struct {
						Attempt int `json:"attempt"`
					} `json:"dccFlow_attempt"`
				} `json:"facets"`
			} `json:"run"`
		}
		if err := json.Unmarshal(b, &ev); err != nil || ev.Run.Facets.Attempt.Attempt != i+1 {
			t.Fatalf("request %d: attempt %d (%v)", i, ev.Run.Facets.Attempt.Attempt, err)
		}
	}
	em.Emit(sampleEvent(Start))
	if em.Dropped() != 1 {
		t.Errorf("Emit after Close: dropped %d", em.Dropped())
	}
}

func TestNilEmitterDoesNothing(t *testing.T) {
	var em *Emitter
	em.Emit(sampleEvent(Start))
	if em.Dropped()+em.Failed()+em.Delivered() != 0 || em.Close(context.Background()) != nil {
		t.Fatal("a nil Emitter counted or failed")
	}
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFileGetsOneJSONLinePerEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lineage.jsonl")
	if err := os.WriteFile(path, []byte("{\"earlier\":true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	em, err := New(Config{File: path})
	if err != nil {
		t.Fatal(err)
	}
	fail := sampleEvent(Fail)
	fail.ErrorMessage, fail.ErrorTrace = "no camera\nin scene", "Traceback (most recent call last):\n  x\n"
	em.Emit(sampleEvent(Start))
	em.Emit(fail)
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 3 || string(lines[0]) != `{"earlier":true}` {
		t.Fatalf("%d lines: %q", len(lines), lines)
	}
	if ev := validateEvent(t, lines[1]); ev["eventType"] != "START" {
		t.Errorf("line 2: %v", ev["eventType"])
	}
	if ev := validateEvent(t, lines[2]); ev["eventType"] != "FAIL" {
		t.Errorf("line 3: %v", ev["eventType"])
	}
	if em.Delivered() != 2 {
		t.Errorf("delivered %d", em.Delivered())
	}
}

// Two emitters of one process append to one file: every line is a whole event. (On Linux a
// single O_APPEND write to a regular file is not interleaved anyway; the per-file lock keeps
// it so where that does not hold, such as some network file systems.)
func TestTwoEmittersShareAFileWithoutInterleaving(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lineage.jsonl")
	big := sampleEvent(Complete)
	for i := range 150 { // ~25 KB lines: well past a pipe's atomic write size (4 KiB)
		big.Inputs = append(big.Inputs, Dataset{Path: filepath.Join("/mnt/show/assets", strings.Repeat("x", 150), string(rune('a'+i%26))+strings.Repeat("y", i)), Size: int64(i)})
	}
	const each = 25
	var wg sync.WaitGroup
	for range 2 {
		em, err := New(Config{File: path, QueueSize: each})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				em.Emit(big)
			}
			_ = closeWithin(t, em, 30*time.Second)
		}()
	}
	wg.Wait()
	lines := readLines(t, path)
	if len(lines) != 2*each {
		t.Fatalf("%d lines, want %d", len(lines), 2*each)
	}
	for i, l := range lines {
		if !json.Valid(l) {
			t.Fatalf("line %d is not JSON (interleaved?): %.200s…", i+1, l)
		}
	}
	validateEvent(t, lines[0])
}

func TestFileAndURLBoth(t *testing.T) {
	rec := newRecorder(t)
	path := filepath.Join(t.TempDir(), "lineage.jsonl")
	em, err := New(Config{URL: rec.url(), File: path})
	if err != nil {
		t.Fatal(err)
	}
	em.Emit(sampleEvent(Start))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	lines, reqs := readLines(t, path), rec.requests()
	if len(lines) != 1 || len(reqs) != 1 || string(lines[0]) != string(reqs[0]) {
		t.Fatalf("file %q, requests %q", lines, reqs)
	}
}

func TestNewReportsAFileItCannotWrite(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{filepath.Join(dir, "no-such-dir", "l.jsonl"), "cannot be opened for appending"},
		{dir, "cannot be opened for appending"}, // a directory
	} {
		_, err := New(Config{File: c.file})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.file)) { // quoted: Windows' backslashes doubled
			t.Errorf("%s: %v", c.file, err)
		}
	}
}

func TestFileRemovedMeanwhileIsRecreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lineage.jsonl")
	em, _ := New(Config{File: path})
	if err := os.Remove(path); err != nil { // log rotation moved it away
		t.Fatal(err)
	}
	em.Emit(sampleEvent(Start))
	if err := closeWithin(t, em, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if lines := readLines(t, path); len(lines) != 1 {
		t.Fatalf("%d lines", len(lines))
	}
}
