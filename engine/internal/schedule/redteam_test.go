package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stamp is the X-Dcc-Flow-Signature of body at t under testSecret.
func stamp(t int64, body []byte) string {
	ts := strconv.FormatInt(t, 10)
	return "t=" + ts + ",v1=" + HMACSHA256Hex([]byte(testSecret), append([]byte(ts+"."), body...))
}

func stampedBundle(t *testing.T, tolerance int) *webhookBundle {
	t.Helper()
	sp := DefaultSpec("stamped", "ingest", Trigger{Kind: KindWebhook, Path: "/hooks/stamped", SecretEnv: "SIGNED_SECRET",
		Signature: SignatureTimestamped, ToleranceSecs: tolerance})
	sp.MaxConcurrent = 0
	return setupWebhooks(t, Config{Schedules: []Spec{sp}}, nil)
}

// TestRedteamWebhookReplayTimestamped: with signature: timestamped, a captured signed request
// replayed with a new delivery id (or none) is answered as a duplicate of the first run, and
// once outside the tolerance window it is refused (401 signature_expired); nothing starts a
// second run. With the GitHub signature (kept for GitHub senders) the delivery id is not
// signed, so such a replay starts a new run: that mode does not resist replay. Before the fix
// the timestamped mode did not exist and the replay started a second run.
func TestRedteamWebhookReplayTimestamped(t *testing.T) {
	w := stampedBundle(t, 0)
	body := []byte(`{"file": {"path": "/in/a.ma", "size": 42}}`)
	now := w.clock.Now().Unix()
	sig := stamp(now, body)
	first := w.do(t, http.MethodPost, "/hooks/stamped", map[string]string{TimestampedSignatureHeader: sig, DeliveryHeader: "d1"}, body)
	if first.status != http.StatusAccepted {
		t.Fatalf("first delivery: %d %s", first.status, first.raw)
	}
	runID := first.body["run_id"]
	for _, delivery := range []string{"d2-replayed", ""} {
		h := map[string]string{TimestampedSignatureHeader: sig}
		if delivery != "" {
			h[DeliveryHeader] = delivery
		}
		r := w.do(t, http.MethodPost, "/hooks/stamped", h, body)
		if r.status != http.StatusOK || r.body["duplicate"] != true || r.body["run_id"] != runID {
			t.Fatalf("replay with delivery id %q: %d %s", delivery, r.status, r.raw)
		}
	}
	// Outside the window (the default 300 s): refused, whatever the delivery id.
	w.clock.Advance(301 * time.Second)
	r := w.do(t, http.MethodPost, "/hooks/stamped", map[string]string{TimestampedSignatureHeader: sig, DeliveryHeader: "d3"}, body)
	if r.status != http.StatusUnauthorized || r.body["error"] != WebhookSignatureExpired || !strings.Contains(r.raw, "tolerance_secs") {
		t.Fatalf("replay after 301 s: %d %s", r.status, r.raw)
	}
	if n := len(w.starter.requests()); n != 1 {
		t.Fatalf("%d runs started; the replays must start none", n)
	}
	// A fresh signature (a new t) is a new request; one from the future beyond the window is not.
	now = w.clock.Now().Unix()
	if r := w.do(t, http.MethodPost, "/hooks/stamped", map[string]string{TimestampedSignatureHeader: stamp(now, body)}, body); r.status != http.StatusAccepted {
		t.Fatalf("a fresh signature: %d %s", r.status, r.raw)
	}
	if r := w.do(t, http.MethodPost, "/hooks/stamped", map[string]string{TimestampedSignatureHeader: stamp(now+301, body)}, body); r.status != http.StatusUnauthorized || r.body["error"] != WebhookSignatureExpired {
		t.Fatalf("t 301 s ahead: %d %s", r.status, r.raw)
	}
	// Several v1 (a secret being rotated): one that matches is enough.
	now++
	good := stamp(now, body)
	two := "t=" + strconv.FormatInt(now, 10) + ",v1=" + strings.Repeat("0", 64) + "," + good[strings.Index(good, "v1="):]
	if r := w.do(t, http.MethodPost, "/hooks/stamped", map[string]string{TimestampedSignatureHeader: two}, body); r.status != http.StatusAccepted {
		t.Fatalf("two v1, one right: %d %s", r.status, r.raw)
	}
	for name, h := range map[string]map[string]string{
		"no header":         {},
		"github header":     {SignatureHeader: sign(body)},
		"no t":              {TimestampedSignatureHeader: "v1=" + strings.Repeat("a", 64)},
		"no v1":             {TimestampedSignatureHeader: "t=" + strconv.FormatInt(now, 10)},
		"body not signed":   {TimestampedSignatureHeader: "t=" + strconv.FormatInt(now, 10) + ",v1=" + HMACSHA256Hex([]byte(testSecret), body)},
		"t not a number":    {TimestampedSignatureHeader: "t=soon,v1=" + strings.Repeat("a", 64)},
		"another body's v1": {TimestampedSignatureHeader: stamp(now, []byte(`{}`))},
	} {
		r := w.do(t, http.MethodPost, "/hooks/stamped", h, body)
		if r.status != http.StatusUnauthorized || r.body["error"] != WebhookInvalidSignature || !strings.Contains(r.raw, TimestampedSignatureHeader) {
			t.Errorf("%s: %d %s", name, r.status, r.raw)
		}
	}

	// GitHub mode: the same capture replayed with a new delivery id starts a second run.
	gh := setupWebhooks(t, Config{}, nil)
	for _, d := range []string{"g1", "g2"} {
		if r := gh.do(t, http.MethodPost, "/hooks/signed", map[string]string{SignatureHeader: sign(body), DeliveryHeader: d}, body); r.status != http.StatusAccepted {
			t.Fatalf("github mode, delivery %s: %d %s", d, r.status, r.raw)
		}
	}
	if n := len(gh.starter.requests()); n != 2 {
		t.Fatalf("github mode: %d runs", n)
	}
}

// TestRedteamWebhookTimestampedValidation: the new trigger fields are checked with the fix.
func TestRedteamWebhookTimestampedValidation(t *testing.T) {
	src := `schedules:
  - id: a
    workflow: w
    trigger: {kind: webhook, path: /a, signature: stripe, secret_env: S}
  - id: b
    workflow: w
    trigger: {kind: webhook, path: /b, signature: timestamped}
  - id: c
    workflow: w
    trigger: {kind: webhook, path: /c, secret_env: S, tolerance_secs: 60}
  - id: d
    workflow: w
    trigger: {kind: webhook, path: /d, secret_env: S, signature: timestamped, tolerance_secs: 99999}
  - id: e
    workflow: w
    trigger: {kind: cron, expression: "0 0 3 * * *", signature: timestamped}
  - id: ok
    workflow: w
    trigger: {kind: webhook, path: /ok, secret_env: S, signature: timestamped, tolerance_secs: 60}
`
	_, err := Parse([]byte(src), ParseOptions{File: "x.schedules.yaml"})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%v", err)
	}
	want := map[string]string{"a": "trigger.signature", "b": "trigger.secret_env", "c": "trigger.tolerance_secs",
		"d": "trigger.tolerance_secs", "e": "trigger.signature"}
	got := map[string]string{}
	for _, p := range ve.Problems {
		for _, id := range []string{"a", "b", "c", "d", "e", "ok"} {
			if strings.Contains(p.Message, `schedule "`+id+`"`) {
				got[id] += p.Message
			}
		}
	}
	for id, f := range want {
		if !strings.Contains(got[id], strings.TrimPrefix(f, "trigger.")) {
			t.Errorf("schedule %s: want a problem on %s; problems: %v", id, f, ve.Problems)
		}
	}
	if _, bad := got["ok"]; bad {
		t.Errorf("a valid timestamped schedule has a problem: %v", ve.Problems)
	}
	specs, err := Parse([]byte("schedules:\n"+src[strings.Index(src, "  - id: ok"):]), ParseOptions{})
	if err != nil || specs[0].Trigger.Signature != SignatureTimestamped || specs[0].Trigger.ToleranceSecs != 60 {
		t.Fatalf("a valid timestamped schedule: %v %+v", err, specs)
	}
}

// TestRedteamWebhookUnsignedOffLoopback: a request for a schedule without secret_env that
// arrived on a non-loopback address is refused (403 unsigned_webhook_refused, naming the
// schedule and secret_env) unless the handler was built with AllowUnsigned; signed schedules
// and loopback requests are served. Before the fix anyone who reached the port started runs.
func TestRedteamWebhookUnsignedOffLoopback(t *testing.T) {
	w := setupWebhooks(t, Config{}, nil)
	body := []byte(`{"file": {"path": "/in/a.ma", "size": 1}}`)
	serve := func(h http.Handler, local string, path string, header map[string]string) (int, map[string]any) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body)))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		addr, _ := net.ResolveTCPAddr("tcp", local)
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, net.Addr(addr)))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	h := w.sched.Handler()
	code, out := serve(h, "192.0.2.10:8787", "/hooks/open", nil)
	if code != http.StatusForbidden || out["error"] != WebhookUnsignedRefused || !strings.Contains(out["message"].(string), `"open"`) ||
		!strings.Contains(out["message"].(string), "secret_env") {
		t.Fatalf("unsigned over a LAN address: %d %v", code, out)
	}
	if code, out := serve(h, "192.0.2.10:8787", "/hooks/signed", map[string]string{SignatureHeader: sign(body)}); code != http.StatusAccepted {
		t.Fatalf("signed over a LAN address: %d %v", code, out)
	}
	if code, out := serve(h, "127.0.0.1:8787", "/hooks/open", nil); code != http.StatusAccepted {
		t.Fatalf("unsigned over loopback: %d %v", code, out)
	}
	if code, out := serve(w.sched.Handler(AllowUnsigned()), "192.0.2.10:8787", "/hooks/open", nil); code != http.StatusAccepted {
		t.Fatalf("unsigned over a LAN address, opted in: %d %v", code, out)
	}
	if ids := w.sched.UnsignedWebhooks(); len(ids) != 1 || ids[0] != "open" {
		t.Fatalf("UnsignedWebhooks: %v", ids)
	}
}
