package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

const testSecret = "s3cret"

type webhookBundle struct {
	*testBundle
	srv *httptest.Server
}

// setupWebhooks serves a scheduler with these webhook schedules on 127.0.0.1:
//
//	/hooks/open     no secret, max_concurrent 0, inputs rendered from the payload
//	/hooks/signed   secret from SIGNED_SECRET (set), max_concurrent 1
//	/hooks/missing  secret from MISSING_SECRET (unset)
//	/hooks/off      disabled
func setupWebhooks(t *testing.T, cfg Config, fires FireLog, opts ...Option) *webhookBundle {
	t.Helper()
	open := DefaultSpec("open", "ingest", Trigger{Kind: KindWebhook, Path: "/hooks/open"})
	open.MaxConcurrent = 0
	open.Inputs = map[string]any{
		"path":  "{{trigger.payload.file.path}}",
		"size":  "{{trigger.payload.file.size}}",
		"tags":  "{{trigger.payload.tags}}",
		"first": "{{trigger.payload.tags[0]}}",
		"note":  "{{trigger.schedule_id}}/{{trigger.workflow}} size={{trigger.payload.file.size}}",
		"when":  "{{trigger.fired_at}}",
		"id":    "{{trigger.delivery_id}}",
	}
	signed := DefaultSpec("signed", "validate", Trigger{Kind: KindWebhook, Path: "/hooks/signed", SecretEnv: "SIGNED_SECRET"})
	missing := DefaultSpec("missing", "validate", Trigger{Kind: KindWebhook, Path: "/hooks/missing", SecretEnv: "MISSING_SECRET"})
	off := DefaultSpec("off", "validate", Trigger{Kind: KindWebhook, Path: "/hooks/off"})
	off.Enabled = false
	cfg.Schedules = append(cfg.Schedules, open, signed, missing, off)
	cfg.LookupEnv = func(k string) (string, bool) {
		if k == "SIGNED_SECRET" {
			return testSecret, true
		}
		if k == "MISSING_SECRET" {
			return "", true // set but empty counts as missing
		}
		return "", false
	}
	b := &testBundle{clock: clock.NewStub(time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)), starter: newFakeStarter()}
	if fires == nil {
		b.fires = NewMemFireLog(0)
		fires = b.fires
	}
	s, err := New(cfg, b.starter, fires, append([]Option{WithClock(b.clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b.sched = s
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &webhookBundle{testBundle: b, srv: srv}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (w *webhookBundle) do(t *testing.T, method, path string, header map[string]string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, w.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := w.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := reply{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if method != http.MethodHead {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
	}
	return r
}

func sign(body []byte) string { return "sha256=" + HMACSHA256Hex([]byte(testSecret), body) }

func TestWebhookStatusCodes(t *testing.T) {
	t.Parallel()
	body := []byte(`{"file": {"path": "/in/a.ma", "size": 42}, "tags": ["x", "y"]}`)
	big := []byte(`{"pad": "` + strings.Repeat("x", 200) + `"}`)
	tests := []struct {
		name   string
		method string
		path   string
		header map[string]string
		body   []byte
		status int
		code   string // "error" field; "" for success
		msg    string // substring of "message"
	}{
		{"accepted", "POST", "/hooks/open", nil, body, 202, "", ""},
		{"empty body is a null payload", "POST", "/hooks/open", nil, nil, 202, "", ""},
		{"form-encoded payload", "POST", "/hooks/open", map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			[]byte("payload=" + url.QueryEscape(string(body))), 202, "", ""},
		{"content type ignored for json", "POST", "/hooks/open", map[string]string{"Content-Type": "text/plain"}, body, 202, "", ""},
		{"unknown path", "POST", "/hooks/nope", nil, body, 404, WebhookUnknown, `"/hooks/nope"`},
		{"disabled schedule", "POST", "/hooks/off", nil, body, 404, WebhookUnknown, ""},
		{"trailing slash is another path", "POST", "/hooks/open/", nil, body, 404, WebhookUnknown, ""},
		{"GET", "GET", "/hooks/open", nil, nil, 405, WebhookMethodNotAllowed, "only POST"},
		{"PUT", "PUT", "/hooks/signed", nil, body, 405, WebhookMethodNotAllowed, "only POST"},
		{"secret missing", "POST", "/hooks/missing", map[string]string{SignatureHeader: sign(body)}, body, 500, WebhookSecretMissing, "MISSING_SECRET"},
		{"too large", "POST", "/hooks/open", nil, big, 413, WebhookPayloadTooLarge, "128 bytes"},
		{"signed", "POST", "/hooks/signed", map[string]string{SignatureHeader: sign(body)}, body, 202, "", ""},
		{"signed uppercase hex", "POST", "/hooks/signed", map[string]string{SignatureHeader: "sha256=" + strings.ToUpper(HMACSHA256Hex([]byte(testSecret), body))}, body, 202, "", ""},
		{"signature header missing", "POST", "/hooks/signed", nil, body, 401, WebhookInvalidSignature, "no X-Hub-Signature-256 header"},
		{"bare hex", "POST", "/hooks/signed", map[string]string{SignatureHeader: HMACSHA256Hex([]byte(testSecret), body)}, body, 401, WebhookInvalidSignature, `"sha256="`},
		{"sha1 prefix", "POST", "/hooks/signed", map[string]string{SignatureHeader: "sha1=" + HMACSHA256Hex([]byte(testSecret), body)}, body, 401, WebhookInvalidSignature, `"sha256="`},
		{"short digest", "POST", "/hooks/signed", map[string]string{SignatureHeader: "sha256=abcd"}, body, 401, WebhookInvalidSignature, "64 hex digits"},
		{"not hex", "POST", "/hooks/signed", map[string]string{SignatureHeader: "sha256=" + strings.Repeat("zz", 32)}, body, 401, WebhookInvalidSignature, "not hex"},
		{"wrong secret", "POST", "/hooks/signed", map[string]string{SignatureHeader: "sha256=" + HMACSHA256Hex([]byte("other"), body)}, body, 401, WebhookInvalidSignature, "does not match"},
		{"tampered body", "POST", "/hooks/signed", map[string]string{SignatureHeader: sign(body)}, append([]byte(" "), body...), 401, WebhookInvalidSignature, "does not match"},
		{"signature checked before json", "POST", "/hooks/signed", nil, []byte("{"), 401, WebhookInvalidSignature, ""},
		{"invalid json", "POST", "/hooks/open", nil, []byte(`{"a":`), 400, WebhookInvalidJSON, "not valid JSON"},
		{"trailing data", "POST", "/hooks/open", nil, []byte(`{} {}`), 400, WebhookInvalidJSON, "after top-level value"},
		{"form without payload", "POST", "/hooks/open", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, []byte("a=1"), 400, WebhookInvalidJSON, "has no `payload` field: send the JSON with Content-Type: application/json"},
		{"JSON sent as a form", "POST", "/hooks/open", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, []byte(`{"path": "a;b%/c"}`), 400, WebhookInvalidJSON, "is not a valid form (invalid semicolon separator in query): send the JSON with Content-Type: application/json"},
		{"delivery id too long", "POST", "/hooks/open", map[string]string{DeliveryHeader: strings.Repeat("d", 300)}, body, 400, WebhookInvalidDelivery, "300 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var seen []Delivery // WithDeliveryObserver: one per request, with the status answered
			w := setupWebhooks(t, Config{MaxBodyBytes: 128}, nil, WithDeliveryObserver(func(d Delivery) {
				mu.Lock()
				seen = append(seen, d)
				mu.Unlock()
			}))
			r := w.do(t, tc.method, tc.path, tc.header, tc.body)
			mu.Lock()
			defer mu.Unlock()
			if r.status != tc.status {
				t.Fatalf("status %d, body %s; want %d", r.status, r.raw, tc.status)
			}
			wantResult := tc.code
			if wantResult == "" {
				wantResult = "enqueued"
			}
			id, _ := r.body["schedule_id"].(string) // none for an unknown path
			if want := (Delivery{ScheduleID: id, Status: tc.status, Result: wantResult}); len(seen) != 1 || seen[0] != want ||
				(tc.code != WebhookUnknown) != (id != "") {
				t.Errorf("observed %+v, want [%+v]", seen, want)
			}
			if tc.code == "" {
				if r.body["status"] != "enqueued" || r.body["run_id"] != "run-1" || r.body["error"] != nil {
					t.Errorf("body %s", r.raw)
				}
				return
			}
			if r.body["error"] != tc.code || !strings.Contains(fmt.Sprint(r.body["message"]), tc.msg) {
				t.Errorf("body %s; want error %q with a message containing %q", r.raw, tc.code, tc.msg)
			}
			if tc.status == 405 && r.header.Get("Allow") != "POST" {
				t.Errorf("Allow %q", r.header.Get("Allow"))
			}
			if n := len(w.starter.requests()); n != 0 {
				t.Errorf("%d runs started by a refused request", n)
			}
		})
	}
}

func TestWebhookChunkedTooLarge(t *testing.T) {
	t.Parallel()
	w := setupWebhooks(t, Config{MaxBodyBytes: 64}, nil)
	// No Content-Length: the limit is enforced while reading.
	req, _ := http.NewRequest("POST", w.srv.URL+"/hooks/open", io.MultiReader(strings.NewReader(`{"a":"`), strings.NewReader(strings.Repeat("x", 1000)+`"}`)))
	req.ContentLength = -1
	res, err := w.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	if res.StatusCode != 413 || body["error"] != WebhookPayloadTooLarge {
		t.Errorf("status %d body %v", res.StatusCode, body)
	}
}

func TestWebhookAcceptedRendersInputs(t *testing.T) {
	t.Parallel()
	w := setupWebhooks(t, Config{}, nil)
	body := []byte(`{"file": {"path": "/in/a.ma", "size": 42}, "tags": ["x", "y"]}`)
	r := w.do(t, "POST", "/hooks/open", map[string]string{DeliveryHeader: "d-1"}, body)
	want := map[string]any{"status": "enqueued", "schedule_id": "open", "workflow": "ingest", "run_id": "run-1"}
	if r.status != 202 || !reflect.DeepEqual(r.body, want) {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	req := w.starter.requests()[0]
	wantInputs := map[string]any{
		"path": "/in/a.ma", "size": 42.0, "tags": []any{"x", "y"}, "first": "x",
		"note": "open/ingest size=42", "when": "2026-04-01T12:00:00Z", "id": "d-1",
	}
	if !reflect.DeepEqual(req.Inputs, wantInputs) {
		t.Errorf("inputs %#v", req.Inputs)
	}
	if req.Origin != OriginWebhook || req.DeliveryID != "d-1" || req.Trigger["kind"] != "webhook" || req.Trigger["payload"] == nil {
		t.Errorf("request %+v", req)
	}
	h := w.history(t, "open")
	if len(h) != 1 || h[0].Kind != FireFired || h[0].RunID != "run-1" || h[0].DeliveryID != "d-1" || h[0].Origin != OriginWebhook {
		t.Errorf("history %+v", h)
	}
}

func TestWebhookMaxConcurrent(t *testing.T) {
	t.Parallel()
	w := setupWebhooks(t, Config{}, nil)
	body := []byte(`{}`)
	hdr := map[string]string{SignatureHeader: sign(body)}
	if r := w.do(t, "POST", "/hooks/signed", hdr, body); r.status != 202 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	w.starter.setActive("signed", 1)
	r := w.do(t, "POST", "/hooks/signed", hdr, body)
	if r.status != 429 || r.body["error"] != WebhookMaxConcurrent || r.body["in_flight"] != 1.0 || r.body["max"] != 1.0 {
		t.Fatalf("over the limit: %d %s", r.status, r.raw)
	}
	w.starter.setActive("signed", 0)
	if r := w.do(t, "POST", "/hooks/signed", hdr, body); r.status != 202 || r.body["run_id"] != "run-2" {
		t.Fatalf("after the run ended: %d %s", r.status, r.raw)
	}
	var kinds []FireKind
	for _, f := range w.history(t, "signed") {
		kinds = append(kinds, f.Kind)
	}
	if !reflect.DeepEqual(kinds, []FireKind{FireFired, FireSkipped, FireFired}) {
		t.Errorf("kinds %v", kinds)
	}
}

func TestWebhookStartFailed(t *testing.T) {
	t.Parallel()
	w := setupWebhooks(t, Config{}, nil)
	w.starter.startErr = errors.New("engine closed")
	r := w.do(t, "POST", "/hooks/open", map[string]string{DeliveryHeader: "d-9"}, []byte(`{}`))
	if r.status != 500 || r.body["error"] != WebhookStartFailed || !strings.Contains(r.raw, "engine closed") {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	h := w.history(t, "open")
	if len(h) != 1 || h[0].Kind != FireFailed || h[0].Reason != ReasonStartFailed {
		t.Errorf("history %+v", h)
	}
	// A failed delivery is not a duplicate: its redelivery starts the run.
	w.starter.mu.Lock()
	w.starter.startErr = nil
	w.starter.mu.Unlock()
	if r := w.do(t, "POST", "/hooks/open", map[string]string{DeliveryHeader: "d-9"}, []byte(`{}`)); r.status != 202 {
		t.Errorf("redelivery after a failure: %d %s", r.status, r.raw)
	}
}

func TestWebhookRedelivery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header string
	}{
		{"github delivery", DeliveryHeader},
		{"idempotency key", IdempotencyHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			results := map[Delivery]int{}
			w := setupWebhooks(t, Config{}, nil, WithDeliveryObserver(func(d Delivery) {
				mu.Lock()
				results[d]++
				mu.Unlock()
			}))
			defer func() {
				mu.Lock()
				defer mu.Unlock()
				want := map[Delivery]int{{"signed", 202, "enqueued"}: 1, {"signed", 200, "duplicate"}: 3, {"signed", 429, WebhookMaxConcurrent}: 1}
				if !maps.Equal(results, want) {
					t.Errorf("observed deliveries %v, want %v", results, want)
				}
			}()
			body := []byte(`{"n": 1}`)
			hdr := map[string]string{SignatureHeader: sign(body), tc.header: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
			first := w.do(t, "POST", "/hooks/signed", hdr, body)
			if first.status != 202 {
				t.Fatalf("first: %d %s", first.status, first.raw)
			}
			// Even while the first run is active (max_concurrent 1), a redelivery is a duplicate.
			w.starter.setActive("signed", 1)
			for range 3 {
				again := w.do(t, "POST", "/hooks/signed", hdr, body)
				if again.status != 200 || again.body["run_id"] != first.body["run_id"] || again.body["duplicate"] != true {
					t.Fatalf("redelivery: %d %s", again.status, again.raw)
				}
			}
			if n := len(w.starter.requests()); n != 1 {
				t.Errorf("%d runs started; want 1", n)
			}
			if n := len(w.history(t, "signed")); n != 1 {
				t.Errorf("%d fires recorded; want 1", n)
			}
			// A different delivery id is a new request (here over the limit).
			hdr[tc.header] = "other"
			if r := w.do(t, "POST", "/hooks/signed", hdr, body); r.status != 429 {
				t.Errorf("new delivery: %d %s", r.status, r.raw)
			}
		})
	}
}

func TestWebhookConcurrentRedeliveryStartsOneRun(t *testing.T) {
	t.Parallel()
	w := setupWebhooks(t, Config{}, nil)
	var wg sync.WaitGroup
	runIDs := make([]string, 32)
	for i := range runIDs {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", w.srv.URL+"/hooks/open", strings.NewReader(`{}`))
			req.Header.Set(DeliveryHeader, "same")
			res, err := w.srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(res.Body).Decode(&body)
			runIDs[i], _ = body["run_id"].(string)
		})
	}
	wg.Wait()
	for _, id := range runIDs {
		if id != "run-1" {
			t.Fatalf("run ids %v; want run-1 for all", runIDs)
		}
	}
	if n := len(w.starter.requests()); n != 1 {
		t.Errorf("%d runs started; want 1", n)
	}
}

// plainFireLog is a FireLog without DeliveryFinder.
type plainFireLog struct{ m *MemFireLog }

func (p plainFireLog) RecordFire(ctx context.Context, f Fire) error { return p.m.RecordFire(ctx, f) }
func (p plainFireLog) LastFire(ctx context.Context, id string) (Fire, bool, error) {
	return p.m.LastFire(ctx, id)
}
func (p plainFireLog) Fires(ctx context.Context, id string, n int) ([]Fire, error) {
	return p.m.Fires(ctx, id, n)
}

func TestWebhookDeliveryWindow(t *testing.T) {
	t.Parallel()
	post := func(w *webhookBundle, id string) reply {
		return w.do(t, "POST", "/hooks/open", map[string]string{DeliveryHeader: id}, nil)
	}
	t.Run("fire log finds evicted ids", func(t *testing.T) {
		t.Parallel()
		w := setupWebhooks(t, Config{DedupSize: 1}, nil)
		post(w, "a")
		post(w, "b") // evicts a from the window
		if r := post(w, "a"); r.status != 200 || r.body["run_id"] != "run-1" {
			t.Errorf("redelivery of an evicted id: %d %s", r.status, r.raw)
		}
	})
	t.Run("size bound without a finder", func(t *testing.T) {
		t.Parallel()
		w := setupWebhooks(t, Config{DedupSize: 1}, plainFireLog{NewMemFireLog(0)})
		post(w, "a")
		post(w, "b")
		if r := post(w, "a"); r.status != 202 || r.body["run_id"] != "run-3" {
			t.Errorf("an id outside the window: %d %s", r.status, r.raw)
		}
	})
	t.Run("ttl without a finder", func(t *testing.T) {
		t.Parallel()
		w := setupWebhooks(t, Config{DedupTTL: time.Hour}, plainFireLog{NewMemFireLog(0)})
		post(w, "a")
		w.clock.Advance(59 * time.Minute)
		if r := post(w, "a"); r.status != 200 {
			t.Errorf("within the TTL: %d %s", r.status, r.raw)
		}
		w.clock.Advance(time.Hour)
		if r := post(w, "a"); r.status != 202 {
			t.Errorf("after the TTL: %d %s", r.status, r.raw)
		}
	})
}

func TestWebhookRoutesFollowSchedule(t *testing.T) {
	t.Parallel()
	w := setupWebhooks(t, Config{}, nil)
	if err := w.sched.Schedule(DefaultSpec("late", "wf", Trigger{Kind: KindWebhook, Path: "/hooks/late"})); err != nil {
		t.Fatal(err)
	}
	if r := w.do(t, "POST", "/hooks/late", nil, nil); r.status != 202 || r.body["schedule_id"] != "late" {
		t.Errorf("added: %d %s", r.status, r.raw)
	}
	if err := w.sched.Unschedule("late"); err != nil {
		t.Fatal(err)
	}
	if r := w.do(t, "POST", "/hooks/late", nil, nil); r.status != 404 {
		t.Errorf("removed: %d %s", r.status, r.raw)
	}
	var missing bool
	for _, in := range w.sched.Schedules() {
		if in.Spec.ID == "missing" {
			missing = in.SecretMissing
		}
	}
	if !missing {
		t.Error("Schedules() does not flag the missing secret")
	}
}

// panicStarter panics in Start; the webhook answers 500 start_failed and a loop records a
// failed fire instead of crashing the process.
type panicStarter struct{ fakeStarter }

func (*panicStarter) Start(context.Context, StartRequest) (string, error) { panic("boom") }

func TestStarterPanicsAreContained(t *testing.T) {
	t.Parallel()
	clk := clock.NewStub(t0)
	fires := NewMemFireLog(0)
	specs := []Spec{DefaultSpec("p", "wf", Trigger{Kind: KindWebhook, Path: "/p"}), DefaultSpec("i", "wf", Trigger{Kind: KindInterval, Every: "1m"})}
	s, err := New(Config{Schedules: specs}, &panicStarter{}, fires, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the admission lock is released after a panic
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/p", strings.NewReader("{}")))
		if rec.Code != 500 || !strings.Contains(rec.Body.String(), WebhookStartFailed) || !strings.Contains(rec.Body.String(), "panicked") {
			t.Errorf("%d %s", rec.Code, rec.Body)
		}
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if err := clk.WaitForTimers(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if err := clk.WaitForTimers(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if f, ok, _ := fires.LastFire(context.Background(), "i"); !ok || f.Kind != FireFailed || !strings.Contains(f.Message, "panicked") {
		t.Errorf("loop fire %+v", f)
	}
}
