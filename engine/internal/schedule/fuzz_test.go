package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

// documentedStatus lists every status the webhook handler may answer.
var documentedStatus = map[int]bool{200: true, 202: true, 400: true, 401: true, 404: true, 405: true, 413: true, 429: true, 500: true}

// switchStarter is a Starter whose answers the fuzzer controls.
type switchStarter struct {
	mu     sync.Mutex
	n      int
	fail   bool
	active int
}

func (s *switchStarter) Start(context.Context, StartRequest) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return "", errors.New("start failed")
	}
	s.n++
	return "run", nil
}

func (s *switchStarter) Active(context.Context, string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active, nil
}

func FuzzWebhook(f *testing.F) {
	body := []byte(`{"file_path": "/in/a.ma", "n": 1}`)
	sig := "sha256=" + HMACSHA256Hex([]byte(testSecret), body)
	f.Add("POST", uint8(0), body, sig, "application/json", "d1", uint8(0))
	f.Add("POST", uint8(1), body, sig, "", "", uint8(1))
	f.Add("GET", uint8(1), []byte{}, "", "", "", uint8(2))
	f.Add("POST", uint8(2), []byte("payload=%7B%7D"), "", "application/x-www-form-urlencoded", "x", uint8(3))
	f.Add("POST", uint8(3), []byte("{"), "sha256=zz", "application/json; charset=utf-8", "", uint8(4))
	f.Add("DELETE", uint8(4), bytes.Repeat([]byte("a"), 600), "", "multipart/form-data; boundary=", "", uint8(5))
	f.Add("POST", uint8(5), []byte(`[1, 2, "x"]`), "", "", "", uint8(6))

	starter := &switchStarter{}
	open := DefaultSpec("open", "wf", Trigger{Kind: KindWebhook, Path: "/hooks/open"})
	open.Inputs = map[string]any{"p": "{{trigger.payload.file_path}}", "all": "{{trigger.payload}}", "s": "x{{trigger.payload.n}}"}
	specs := []Spec{
		open,
		DefaultSpec("signed", "wf", Trigger{Kind: KindWebhook, Path: "/hooks/signed", SecretEnv: "S"}),
		DefaultSpec("missing", "wf", Trigger{Kind: KindWebhook, Path: "/hooks/missing", SecretEnv: "M"}),
	}
	env := func(k string) (string, bool) {
		if k == "S" {
			return testSecret, true
		}
		return "", false
	}
	s, err := New(Config{Schedules: specs, LookupEnv: env, MaxBodyBytes: 512, DedupSize: 8}, starter, NewMemFireLog(16))
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	paths := []string{"/hooks/open", "/hooks/signed", "/hooks/missing", "/hooks/nope", "/", "/hooks/open/"}

	f.Fuzz(func(t *testing.T, method string, which uint8, body []byte, sigHeader, contentType, delivery string, mode uint8) {
		starter.mu.Lock()
		starter.fail, starter.active = mode&1 == 1, int(mode>>1)%3
		starter.mu.Unlock()
		path := paths[int(which)%len(paths)]
		header := http.Header{}
		if sigHeader != "" {
			header.Set(SignatureHeader, sigHeader)
		}
		if contentType != "" {
			header.Set("Content-Type", contentType)
		}
		if delivery != "" {
			header.Set(DeliveryHeader, delivery)
		}
		req := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: header, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Host: "127.0.0.1"}
		if mode&8 != 0 {
			req.ContentLength = -1 // unknown length: the limit applies while reading
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !documentedStatus[rec.Code] {
			t.Fatalf("undocumented status %d: %s", rec.Code, rec.Body)
		}
		var reply map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil {
			t.Fatalf("status %d: body %q is not a JSON object: %v", rec.Code, rec.Body, err)
		}
		if ok := rec.Code == 200 || rec.Code == 202; ok {
			if reply["status"] != "enqueued" || reply["run_id"] == nil {
				t.Fatalf("success body %v", reply)
			}
			if path == "/hooks/signed" && !VerifyHubSignature256([]byte(testSecret), body, sigHeader) {
				t.Fatalf("accepted a request with a bad signature %q", sigHeader)
			}
			if path == "/hooks/missing" || method != http.MethodPost || len(body) > 512 {
				t.Fatalf("accepted %s %s (%d bytes)", method, path, len(body))
			}
		} else if code, _ := reply["error"].(string); code == "" {
			t.Fatalf("error body without a code: %v", reply)
		}
		if rec.Code == 405 && rec.Header().Get("Allow") != "POST" {
			t.Fatalf("405 without Allow: POST")
		}
	})
}

// knownCodes are the problem codes Parse may report.
var knownCodes = map[string]bool{
	CodeParseError: true, CodeTooLarge: true, CodeWrongType: true, CodeMissingField: true, CodeUnknownField: true,
	CodeInvalidValue: true, CodeInvalidID: true, CodeDuplicateID: true, CodeUnknownKind: true, CodeUnknownWorkflow: true,
	CodeInvalidCron: true, CodeInvalidTimezone: true, CodeInvalidInterval: true, CodeInvalidWebhookPath: true,
	CodeDuplicateWebhookPath: true, CodeInvalidTemplate: true, CodeUnknownTemplateVar: true,
}

func FuzzParseSchedules(f *testing.F) {
	f.Add([]byte(referenceFile))
	if data, err := os.ReadFile(filepath.Join("testdata", "problems.schedules.yaml")); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: cron, expression: \"0 30 2 * * *\", timezone: America/New_York}\n",
		"schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: interval, every: 1h30m}\n    catchup: true\n",
		"schedules:\n  - &x {id: a, workflow: w, trigger: {kind: webhook, path: /a}}\n  - *x\n",
		"schedules: [{id: a, workflow: w, inputs: {<<: {k: 1}, t: '{{trigger.payload.a[0]}}'}, trigger: {kind: cron, expression: '@every 1s'}}]",
		`{"schedules": [{"id": "j", "workflow": "w", "trigger": {"kind": "webhook", "path": "/j"}}]}`,
		"schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: cron, expression: \"0 0 0 29 2 *\", jitter_secs: 5}\n",
		"", "~", "schedules: 3", "- a", "schedules: [[[]]]",
	} {
		f.Add([]byte(s))
	}
	workflows := func(n string) bool { return n != "unknown" }
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := Parse(data, ParseOptions{File: "f.schedules.yaml", Workflows: workflows})
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("error %v is not a *ValidationError with problems", err)
			}
			for _, p := range ve.Problems {
				if !knownCodes[p.Code] || p.Message == "" || p.File != "f.schedules.yaml" {
					t.Fatalf("problem %+v", p)
				}
			}
			return
		}
		again, err := Parse(data, ParseOptions{File: "f.schedules.yaml", Workflows: workflows})
		if err != nil || !reflect.DeepEqual(specs, again) {
			t.Fatalf("Parse is not deterministic: %v", err)
		}
		if err := Validate(specs, workflows); err != nil {
			t.Fatalf("parsed specs do not validate: %v", err)
		}
		if _, err := json.Marshal(specs); err != nil {
			t.Fatalf("specs are not JSON-encodable: %v", err)
		}
		for _, sp := range specs {
			_, trig := checkSpec(&sp, workflows)
			if sp.Trigger.Kind == KindWebhook {
				continue
			}
			if trig == nil {
				t.Fatalf("valid spec %q has no trigger", sp.ID)
			}
			at := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
			for range 5 {
				next := trig.next(at)
				if next.IsZero() {
					break
				}
				if !next.After(at) {
					t.Fatalf("%q: next(%s) = %s is not later", sp.Trigger.Expression, at, next)
				}
				at = next
			}
		}
	})
}
