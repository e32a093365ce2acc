package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// stream is a Source over a slice of events; reads counts the EventsAfter calls.
type stream struct {
	mu    sync.Mutex
	evs   []run.Event
	err   error
	reads int
}

func (s *stream) add(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		s.evs = append(s.evs, run.Event{Seq: uint64(len(s.evs) + 1), RunID: "r1", Type: run.EventWorkflowStarted, Status: "running"})
	}
}

func (s *stream) LastSeq(context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.evs)), s.err
}

func (s *stream) EventsAfter(_ context.Context, after uint64, limit int) ([]run.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	end := min(int(after)+limit, len(s.evs))
	return s.evs[after:end], s.err
}

func TestFeedCountsOnlyEventsAfterEnableInBatches(t *testing.T) {
	t.Parallel()
	var f Feed
	src := &stream{}
	src.add(3) // written before the metrics were enabled: never counted
	if f.On() != nil {
		t.Fatal("On before Enable")
	}
	m, err := f.Enable(context.Background(), src, func() *Metrics { return New(Config{Resolve: resolver("nightly")}) })
	if err != nil || f.On() != m {
		t.Fatalf("Enable = %v, %v", m, err)
	}
	again, _ := f.Enable(context.Background(), src, func() *Metrics { t.Fatal("built twice"); return nil })
	if again != m {
		t.Fatal("a second Enable made new metrics")
	}
	src.add(EventBatch + 5)
	if err := f.CatchUp(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.runsStarted.WithLabelValues("nightly")); got != EventBatch+5 {
		t.Fatalf("counted %v runs started; want %d", got, EventBatch+5)
	}
	if src.reads != 2 {
		t.Errorf("%d reads of the stream; want 2 batches", src.reads)
	}
}

func TestFeedHandlerAnswers503WhenClosedAnd500OnOtherErrors(t *testing.T) {
	t.Parallel()
	var f Feed
	src := &stream{}
	m, err := f.Enable(context.Background(), src, func() *Metrics { return New(Config{Resolve: resolver("w")}) })
	if err != nil {
		t.Fatal(err)
	}
	h := f.Handler(m, src)
	for _, c := range []struct {
		err  error
		want int
	}{{nil, http.StatusOK}, {run.Errorf(run.CodeClosed, "the engine is closed"), http.StatusServiceUnavailable}, {errors.New("disk"), http.StatusInternalServerError}} {
		src.mu.Lock()
		src.err = c.err
		src.mu.Unlock()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != c.want {
			t.Errorf("with %v: status %d; want %d", c.err, rec.Code, c.want)
		}
		if c.err != nil && !strings.Contains(rec.Body.String(), c.err.Error()) {
			t.Errorf("body %q does not name %v", rec.Body.String(), c.err)
		}
	}
}

func TestServeRefusesOpenAddressesWithoutTokenAndChecksBearer(t *testing.T) {
	t.Parallel()
	called := false
	h := func() (http.Handler, error) {
		called = true
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }), nil
	}
	for _, addr := range []string{"0.0.0.0:0", "nonsense"} {
		if _, err := Serve(addr, "", h); run.CodeOf(err) != run.CodeInvalidRequest {
			t.Errorf("Serve(%q) = %v; want invalid_request", addr, err)
		}
	}
	if called {
		t.Fatal("the handler was made for a refused address")
	}
	const token = "a-token-long-enough-for-the-check-0123456789"
	s, err := Serve("127.0.0.1:0", token, h)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer " + token, http.StatusOK}} {
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+"/metrics", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("auth %q: status %d; want %d", c.auth, resp.StatusCode, c.want)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestSpecResolverWalksEveryStepList(t *testing.T) {
	t.Parallel()
	const specJSON = `{"name":"nightly","steps":[{"id":"each","kind":"foreach","items":"{{inputs.shots}}","steps":[{"id":"render","kind":"tool","tool":"maya_render"}]},` +
		`{"id":"check","kind":"branch","condition":"{{true}}","then":[{"id":"yes","kind":"tool","tool":"flow__echo"}],"else":[{"id":"no","kind":"approve"}]}],` +
		`"on_failure":[{"id":"notify","kind":"tool","tool":"flow__echo"}]}`
	r := SpecResolver(func(_ context.Context, id string) (string, []byte, error) {
		if id != "r1" {
			return "", nil, errors.New("no run " + id)
		}
		return "nightly", []byte(specJSON), nil
	})
	info, err := r(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]StepInfo{"each": {Kind: "foreach"}, "render": {Kind: "tool", Tool: "maya_render"}, "check": {Kind: "branch"},
		"yes": {Kind: "tool", Tool: "flow__echo"}, "no": {Kind: "approve"}, "notify": {Kind: "tool", Tool: "flow__echo"}}
	if info.Workflow != "nightly" || len(info.Steps) != len(want) {
		t.Fatalf("info %+v; want %v", info, want)
	}
	for id, s := range want {
		if info.Steps[id] != s {
			t.Errorf("step %s: %+v; want %+v", id, info.Steps[id], s)
		}
	}
	if _, err := r(context.Background(), "r2"); err == nil {
		t.Error("an unknown run resolved")
	}
	bad := SpecResolver(func(context.Context, string) (string, []byte, error) { return "w", []byte("{"), nil })
	if info, err := bad(context.Background(), "r3"); err == nil || info.Workflow != "w" {
		t.Errorf("a bad spec: %+v, %v; want the name and an error", info, err)
	}
}
