package gotest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Webhooks served by several engines on one PostgreSQL database, behind a load balancer
// (docs/operations/cluster.md, "Schedules"), with the engines in this process: the same store code path as
// engine processes (TestClusterWebhooks* runs them as processes).

// webhookSchedules are the webhook schedules every engine of these tests serves.
const webhookSchedules = `
schedules:
  - {id: hook, workflow: tick, max_concurrent: 0, trigger: {kind: webhook, path: /hooks/hook}}
  - {id: gated, workflow: hold, max_concurrent: 1, trigger: {kind: webhook, path: /hooks/gated}}
  - {id: later, workflow: later, max_concurrent: 0, trigger: {kind: webhook, path: /hooks/later}}
  - {id: stamped, workflow: tick, max_concurrent: 0, trigger: {kind: webhook, path: /hooks/stamped, secret_env: HOOK_SECRET, signature: timestamped}}
  - {id: brief, workflow: tick, max_concurrent: 0, trigger: {kind: webhook, path: /hooks/brief, secret_env: HOOK_SECRET, signature: timestamped, tolerance_secs: 1}}
`

// hookSecret is the HOOK_SECRET of every engine of these tests (the secret_env of the
// signature: timestamped schedules).
const hookSecret = "s3cret-for-replays"

// webhookEngine is one engine of a webhook test and the URL of its webhook server.
type webhookEngine struct {
	e   *engine.Engine
	url string
}

// openWebhookEngine opens an engine on db that hosts `hold` (answered once release is closed),
// registers tick, hold and later (whose tool `later` no engine hosts yet), loads
// webhookSchedules and serves them on a loopback port.
func openWebhookEngine(t *testing.T, db string, release <-chan struct{}) *webhookEngine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	environ := func() []string { return append(os.Environ(), "HOOK_SECRET="+hookSecret) }
	e, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 2}, engine.WithEnviron(environ))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = e.Close(context.Background())
	})
	for _, text := range []string{
		"name: tick\nsteps:\n  - {id: t, tool: flow__echo, args: {value: 1}}\n",
		"name: hold\nsteps:\n  - {id: h, tool: hold, args: {}}\n",
		"name: later\nsteps:\n  - {id: l, tool: later, args: {}}\n",
	} {
		if err := e.Register(mustSpec(t, text)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "hold", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				go func() {
					if c.Tool == "hold" {
						select {
						case <-release:
						case <-ctx.Done():
						}
					}
					_ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"ok": true}})
				}()
			}
		}
	}()
	specs, err := engine.ParseSchedules([]byte(webhookSchedules), "webhooks", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range specs {
		if err := e.Schedule(sp); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := e.ServeWebhooks("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close(context.Background()) })
	return &webhookEngine{e: e, url: "http://" + ws.Addr()}
}

// hookReply is a webhook's answer.
type hookReply struct {
	code int
	body map[string]any
}

// postHook sends an empty JSON body to url+path with the delivery id (none when "").
func postHook(t *testing.T, url, path, delivery string) hookReply {
	t.Helper()
	req, err := http.NewRequest("POST", url+path, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return hookReply{}
	}
	defer res.Body.Close()
	r := hookReply{code: res.StatusCode}
	if err := json.NewDecoder(res.Body).Decode(&r.body); err != nil {
		t.Errorf("%s%s: the body is not JSON: %v", url, path, err)
	}
	return r
}

// sendToAll sends one delivery to every url at once and returns the replies, in url order.
func sendToAll(t *testing.T, urls []string, path, delivery string) []hookReply {
	t.Helper()
	out := make([]hookReply, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { out[i] = postHook(t, u, path, delivery) })
	}
	wg.Wait()
	return out
}

// checkOneRunPerDelivery checks the replies to one delivery sent to several engines at once:
// one 202 with a run id, the others 200 duplicates of that run, as a redelivery to one engine
// is answered. It returns the run id.
func checkOneRunPerDelivery(t *testing.T, delivery string, rs []hookReply) string {
	t.Helper()
	runID := ""
	for _, r := range rs {
		if r.code == http.StatusAccepted {
			if runID != "" {
				t.Fatalf("delivery %s started two runs: %v", delivery, rs)
			}
			runID, _ = r.body["run_id"].(string)
		}
	}
	if runID == "" {
		t.Fatalf("delivery %s started no run: %v", delivery, rs)
	}
	for _, r := range rs {
		if r.code == http.StatusAccepted {
			continue
		}
		if r.code != http.StatusOK || r.body["duplicate"] != true || r.body["run_id"] != runID ||
			r.body["status"] != "enqueued" || r.body["schedule_id"] == nil || r.body["workflow"] == nil {
			t.Fatalf("delivery %s: %v; want the others answered 200 duplicate of run %s", delivery, rs, runID)
		}
	}
	return runID
}

// Two engines serve one schedules file: deliveries alternate between them and each starts its
// run; then 50 deliveries, each sent to both engines at once, start one run each, the other
// engine answering as for a redelivery.
func TestWebhooksOnTwoEnginesOneRunPerDelivery(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	es := []*webhookEngine{openWebhookEngine(t, db, nil), openWebhookEngine(t, db, nil)}
	urls := []string{es[0].url, es[1].url}
	ctx := context.Background()
	runs := map[string]bool{}
	for i := range 10 {
		r := postHook(t, urls[i%2], "/hooks/hook", fmt.Sprintf("alt-%d", i))
		id, _ := r.body["run_id"].(string)
		if r.code != http.StatusAccepted || id == "" || runs[id] {
			t.Fatalf("delivery %d to engine %d: %d %v; want 202 with a new run", i, i%2, r.code, r.body)
		}
		runs[id] = true
		info, err := es[i%2].e.Wait(ctx, id, 10*time.Second)
		if err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run %s: %+v %v", id, info, err)
		}
	}
	start := time.Now()
	for i := range 50 {
		d := fmt.Sprintf("both-%d", i)
		id := checkOneRunPerDelivery(t, d, sendToAll(t, urls, "/hooks/hook", d))
		if runs[id] {
			t.Fatalf("delivery %s answered with the run %s of another delivery", d, id)
		}
		runs[id] = true
	}
	t.Logf("50 deliveries sent to both engines at once in %s", time.Since(start))
	stored, err := es[0].e.Runs(ctx, engine.RunFilter{Name: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 60 {
		t.Fatalf("%d runs stored; want 60 (one per delivery)", len(stored))
	}
	fires, err := es[1].e.ScheduleFires(ctx, "hook", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 60 {
		t.Fatalf("%d fires recorded; want 60 (a redelivery is not a fire)", len(fires))
	}
}

// A delivery whose run could not start (500 start_failed: no engine hosts its tool) is not
// remembered, as on one engine: its retry, on the other engine once it hosts the tool, starts
// the run, and a later redelivery to the first engine is a duplicate of that run.
func TestWebhooksOnTwoEnginesFailedDeliveryRetried(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	a, b := openWebhookEngine(t, db, nil), openWebhookEngine(t, db, nil)
	r := postHook(t, a.url, "/hooks/later", "d-1")
	if r.code != http.StatusInternalServerError || r.body["error"] != "start_failed" {
		t.Fatalf("no engine hosts `later`: %d %v; want 500 start_failed", r.code, r.body)
	}
	if err := b.e.RegisterTool(flowtype.ToolInfo{Name: "later", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	r = postHook(t, b.url, "/hooks/later", "d-1")
	if r.code != http.StatusAccepted {
		t.Fatalf("the retry on the engine that hosts the tool: %d %v; want 202", r.code, r.body)
	}
	again := postHook(t, a.url, "/hooks/later", "d-1")
	if again.code != http.StatusOK || again.body["duplicate"] != true || again.body["run_id"] != r.body["run_id"] {
		t.Fatalf("redelivery to the first engine: %d %v; want 200 duplicate of %v", again.code, again.body, r.body["run_id"])
	}
	fires, err := a.e.ScheduleFires(context.Background(), "later", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 2 || fires[0].Kind != "fired" || fires[1].Kind != "failed" || fires[1].Reason != "start_failed" {
		t.Fatalf("fires %+v; want failed then fired", fires)
	}
}

// max_concurrent: 1 counts the schedule's runs of every engine: webhooks sent to two engines at
// once while the first run blocks start one run; the other is skipped (429, recorded skipped
// max_concurrent), also later while the run still blocks; once it ended, a fire starts a run.
func TestWebhooksOnTwoEnginesMaxConcurrent(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	es := []*webhookEngine{openWebhookEngine(t, db, release), openWebhookEngine(t, db, release)}
	urls := []string{es[0].url, es[1].url}
	ctx := context.Background()
	rs := sendToAll(t, urls, "/hooks/gated", "")
	var started hookReply
	for _, r := range rs {
		switch r.code {
		case http.StatusAccepted:
			started = r
		case http.StatusTooManyRequests:
			if r.body["error"] != "max_concurrent_exceeded" || r.body["in_flight"] != 1.0 || r.body["max"] != 1.0 {
				t.Fatalf("skipped: %v", r.body)
			}
		}
	}
	if rs[0].code+rs[1].code != http.StatusAccepted+http.StatusTooManyRequests {
		t.Fatalf("two webhooks of a max_concurrent: 1 schedule on two engines at once: %v; want one 202 and one 429", rs)
	}
	for _, u := range urls { // the run still blocks: both engines count it
		if r := postHook(t, u, "/hooks/gated", ""); r.code != http.StatusTooManyRequests {
			t.Fatalf("%s while the run blocks: %d %v; want 429", u, r.code, r.body)
		}
	}
	free()
	id := started.body["run_id"].(string)
	v := viewer(t, db)
	waitFor(t, v, id, run.StatusCompleted, 10*time.Second)
	r := postHook(t, urls[1], "/hooks/gated", "")
	if r.code != http.StatusAccepted {
		t.Fatalf("after the run ended: %d %v; want 202", r.code, r.body)
	}
	fires, err := v.ScheduleFires(ctx, "gated", 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range fires {
		kinds = append(kinds, string(f.Kind)+"/"+f.Reason)
	}
	if want := "fired/ skipped/max_concurrent skipped/max_concurrent skipped/max_concurrent fired/"; strings.Join(kinds, " ") != want {
		t.Fatalf("fires, newest first: %v; want %s", kinds, want)
	}
	runs, err := v.Runs(ctx, engine.RunFilter{Name: "hold"})
	if err != nil || len(runs) != 2 {
		t.Fatalf("%d runs of hold (%v); want 2", len(runs), err)
	}
}

// stampHook is the X-Dcc-Flow-Signature of body sent at unix second t under hookSecret
// (docs/guide/scheduler.md: "t=<t>,v1=<hex HMAC-SHA256 of "<t>.<body>">").
func stampHook(t int64, body string) string {
	ts := strconv.FormatInt(t, 10)
	m := hmac.New(sha256.New, []byte(hookSecret))
	m.Write([]byte(ts + "." + body))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// postStamped sends body to url+path signed with sig, with the delivery id (none when "").
func postStamped(t *testing.T, url, path, sig, delivery, body string) hookReply {
	t.Helper()
	req, err := http.NewRequest("POST", url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Dcc-Flow-Signature", sig)
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return hookReply{}
	}
	defer res.Body.Close()
	r := hookReply{code: res.StatusCode}
	if err := json.NewDecoder(res.Body).Decode(&r.body); err != nil {
		t.Errorf("%s%s: the body is not JSON: %v", url, path, err)
	}
	return r
}

// signature: timestamped behind a load balancer: a signed request captured and replayed to the
// other engine (within tolerance_secs), with a new delivery id or none, is answered 200
// duplicate of the first run, as a replay to one engine is; 30 signed requests, each sent to
// both engines at once (with a different delivery id per engine, or none), start one run each. Before the
// replay guard was shared, each engine knew only the signatures it had admitted, and the other
// engine started a second run.
func TestWebhooksOnTwoEnginesTimestampedReplay(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	es := []*webhookEngine{openWebhookEngine(t, db, nil), openWebhookEngine(t, db, nil)}
	urls := []string{es[0].url, es[1].url}
	ctx := context.Background()
	body := `{"file": "/in/shot_010.ma"}`
	sig := stampHook(time.Now().Unix(), body)
	first := postStamped(t, urls[0], "/hooks/stamped", sig, "cap-1", body)
	id, _ := first.body["run_id"].(string)
	if first.code != http.StatusAccepted || id == "" {
		t.Fatalf("the signed request to engine a: %d %v; want 202", first.code, first.body)
	}
	want := hookReply{code: http.StatusOK, body: map[string]any{"status": "enqueued", "schedule_id": "stamped",
		"workflow": "tick", "run_id": id, "duplicate": true}}
	for _, delivery := range []string{"cap-2", ""} {
		r := postStamped(t, urls[1], "/hooks/stamped", sig, delivery, body)
		if fmt.Sprint(r) != fmt.Sprint(want) {
			t.Fatalf("the replay to engine b with delivery id %q: %d %v; want %d %v", delivery, r.code, r.body, want.code, want.body)
		}
		// The engine that admitted it answers the same (its own memory).
		if r := postStamped(t, urls[0], "/hooks/stamped", sig, delivery+"-a", body); fmt.Sprint(r) != fmt.Sprint(want) {
			t.Fatalf("the replay to engine a: %d %v; want %d %v", r.code, r.body, want.code, want.body)
		}
	}
	runs := map[string]bool{id: true}
	start := time.Now()
	for i := range 30 {
		b := fmt.Sprintf(`{"n": %d}`, i)
		sig := stampHook(time.Now().Unix(), b)
		rs := make([]hookReply, 2)
		var wg sync.WaitGroup
		for k, u := range urls {
			delivery := fmt.Sprintf("both-%d-%d", i, k)
			if i%2 == 1 {
				delivery = "" // the admission lock is taken for the signature alone
			}
			wg.Go(func() { rs[k] = postStamped(t, u, "/hooks/stamped", sig, delivery, b) })
		}
		wg.Wait()
		id := checkOneRunPerDelivery(t, sig, rs)
		if runs[id] {
			t.Fatalf("request %d answered with the run %s of another request", i, id)
		}
		runs[id] = true
	}
	t.Logf("30 signed requests sent to both engines at once in %s", time.Since(start))
	fires, err := es[1].e.ScheduleFires(ctx, "stamped", 0)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := es[0].e.Runs(ctx, engine.RunFilter{Name: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 31 || len(stored) != 31 {
		t.Fatalf("%d fires and %d runs for 31 signed requests; want one each (a replay is not a fire)", len(fires), len(stored))
	}
	// An engine that opens later (a restarted one) has seen nothing in memory: the history
	// answers.
	late := openWebhookEngine(t, db, nil)
	if r := postStamped(t, late.url, "/hooks/stamped", sig, "cap-3", body); fmt.Sprint(r) != fmt.Sprint(want) {
		t.Fatalf("the replay to an engine opened later: %d %v; want %d %v", r.code, r.body, want.code, want.body)
	}
}

// A replay to the other engine once the signature's t is outside tolerance_secs (1 s here) is
// refused 401 signature_expired, as on one engine: an expired signature starts nothing, and
// its key in the shared history does not make it a duplicate either.
func TestWebhooksOnTwoEnginesTimestampedReplayExpired(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	a, b := openWebhookEngine(t, db, nil), openWebhookEngine(t, db, nil)
	body := `{}`
	signed := time.Now().Unix()
	sig := stampHook(signed, body)
	if r := postStamped(t, a.url, "/hooks/brief", sig, "late-1", body); r.code != http.StatusAccepted {
		t.Fatalf("the signed request to engine a: %d %v; want 202", r.code, r.body)
	}
	time.Sleep(time.Until(time.Unix(signed+2, 0)) + 100*time.Millisecond) // t is now > 1 s old
	for _, u := range []string{b.url, a.url} {
		r := postStamped(t, u, "/hooks/brief", sig, "late-2", body)
		if r.code != http.StatusUnauthorized || r.body["error"] != "signature_expired" {
			t.Fatalf("the replay after the window to %s: %d %v; want 401 signature_expired", u, r.code, r.body)
		}
	}
	fires, err := b.e.ScheduleFires(context.Background(), "brief", 0)
	if err != nil || len(fires) != 1 {
		t.Fatalf("%d fires (%v); want the first request's only", len(fires), err)
	}
}
