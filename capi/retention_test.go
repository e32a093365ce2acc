package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// runsPrune: a dry run lists what would go and deletes nothing, "older_than" takes "30d"-style
// ages, "limit" bounds a prune; the other retention exports answer as documented.
func TestRunsPruneDryRunAndLimit(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	var ids []string
	for range 3 {
		id := mustOp(t, h, opRunSubmit, `{"spec": "name: ok\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]"}`)["run_id"].(string)
		mustOp(t, h, opRunWait, fmt.Sprintf(`{"run_id": %q, "timeout_ms": 5000}`, id))
		ids = append(ids, id)
		time.Sleep(2 * time.Millisecond) // distinct finish times, in order
	}
	if p := mustOp(t, h, opRunsPrune, `{"older_than": "30d"}`); p["pruned"] != float64(0) {
		t.Fatalf("pruning runs older than 30 days: %v", p)
	}
	dry := mustOp(t, h, opRunsPrune, `{"finished_before": "2999-01-01T00:00:00Z", "dry_run": true}`)
	runs, _ := dry["runs"].([]any)
	if dry["pruned"] != float64(3) || dry["dry_run"] != true || len(runs) != 3 {
		t.Fatalf("dry run: %v", dry)
	}
	for i, r := range runs {
		m := r.(map[string]any)
		if m["run_id"] != ids[i] || m["status"] != "completed" || m["name"] != "ok" || m["finished_at"] == nil {
			t.Errorf("dry run lists %v at %d; want %s, earliest finished first", m, i, ids[i])
		}
	}
	if n := len(mustOp(t, h, opRunsList, `{}`)["runs"].([]any)); n != 3 {
		t.Fatalf("the dry run deleted runs: %d left", n)
	}
	if p := mustOp(t, h, opRunsPrune, `{"finished_before": "2999-01-01T00:00:00Z", "limit": 2}`); p["pruned"] != float64(2) || p["runs"] != nil {
		t.Fatalf("prune with limit 2: %v", p)
	}
	left := mustOp(t, h, opRunsList, `{}`)["runs"].([]any)
	if len(left) != 1 || left[0].(map[string]any)["run_id"] != ids[2] {
		t.Fatalf("after the limited prune: %v; want the latest run %s", left, ids[2])
	}
	if p := mustOp(t, h, opIdempotencyPurge, `{}`); p["purged"] != float64(0) {
		t.Fatalf("purge: %v", p)
	}
	if r := mustOp(t, h, opRetentionStatus, `{}`); r["retention"] != nil {
		t.Fatalf("retention of an engine that does not serve: %v", r)
	}
	for name, in := range map[string]string{
		"forever":        `{"older_than": "forever"}`,
		"bad age":        `{"older_than": "thirty days"}`,
		"negative limit": `{"older_than": "1d", "limit": -1}`,
		"two ages":       `{"older_than": "1d", "older_than_secs": 5}`,
	} {
		out, rc := dispatch(h, []byte(in), opRunsPrune)
		if rc != rcBadRequest || !strings.Contains(string(out), `"code":"invalid_request"`) {
			t.Errorf("%s: rc %d %s", name, rc, out)
		}
		// A bad age is told as prune's: not with the retention setting's "forever (or 0) to keep them".
		if name == "bad age" && (!strings.Contains(string(out), `\"0\" prunes every ended run`) || strings.Contains(string(out), "to keep them")) {
			t.Errorf("bad age: %s", out)
		}
	}
}

// serve_start applies a retention when it serves something: 30 days unless told, "forever"
// keeps runs (and still purges), and a bad value is refused before anything starts. serve_stop
// stops it.
func TestServeStartsTheRetention(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	if res := mustOp(t, h, opServeStart, `{"scheduler": false}`); res["retention"] != nil {
		t.Fatalf("serve_start that serves nothing (schedules only loaded) applied a retention: %v", res)
	}
	res := mustOp(t, h, opServeStart, `{"scheduler": true}`)
	ret, _ := res["retention"].(map[string]any)
	if ret == nil || ret["keep_secs"] != float64(30*24*3600) || ret["every_secs"] != float64(3600) {
		t.Fatalf("serve_start without retention: %v; want 30 days, hourly", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := mustOp(t, h, opRetentionStatus, `{}`)["retention"].(map[string]any)
		if st["last_pass"] != nil {
			if st["pruned"] != float64(0) || st["error"] != nil {
				t.Fatalf("first pass: %v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retention pass at start: %v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := mustOp(t, h, opServeStart, `{"retention": "forever"}`)["retention"].(map[string]any); r["keep_secs"] != float64(0) {
		t.Fatalf("retention forever: %v", r)
	}
	if r := mustOp(t, h, opServeStart, `{"scheduler": true}`); r["retention"] != nil ||
		mustOp(t, h, opRetentionStatus, `{}`)["retention"].(map[string]any)["keep_secs"] != float64(0) {
		t.Fatalf("serve_start without retention replaced the running one: %v", r)
	}
	out, rc := dispatch(h, []byte(`{"retention": "a month", "webhooks": "127.0.0.1:0"}`), opServeStart)
	if rc != rcBadRequest || !strings.Contains(string(out), "retention") {
		t.Fatalf("a bad retention: rc %d %s", rc, out)
	}
	if st := mustOp(t, h, opServeStatus, `{}`); st["webhooks_addr"] != nil {
		t.Fatalf("a refused serve_start started webhooks: %v", st)
	}
	mustOp(t, h, opServeStop, `{}`)
	if r := mustOp(t, h, opRetentionStatus, `{}`); r["retention"] != nil {
		t.Fatalf("retention after serve_stop: %v", r)
	}
}

// schedule_fires returns a schedule's fire history, newest first, bounded by limit.
func TestScheduleFires(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opWorkflowRegister, `{"text": "name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]"}`)
	mustOp(t, h, opScheduleAdd, `{"id": "h", "workflow": "hook", "enabled": true, "trigger": {"kind": "webhook", "path": "/h"}}`)
	if f := mustOp(t, h, opScheduleFires, `{"id": "h"}`); len(f["fires"].([]any)) != 0 {
		t.Fatalf("fires before any: %v", f)
	}
	addr := mustOp(t, h, opServeStart, `{"webhooks": "127.0.0.1:0", "retention": "forever"}`)["webhooks_addr"].(string)
	for i := range 3 {
		resp, err := http.Post("http://"+addr+"/h", "application/json", strings.NewReader(fmt.Sprintf(`{"n": %d}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	fires := mustOp(t, h, opScheduleFires, `{"id": "h", "limit": 2}`)["fires"].([]any)
	if len(fires) != 2 {
		t.Fatalf("fires with limit 2: %v", fires)
	}
	newest, older := fires[0].(map[string]any), fires[1].(map[string]any)
	if newest["schedule_id"] != "h" || newest["origin"] != "webhook" || newest["fired_at"] == nil || newest["kind"] == nil ||
		newest["fired_at"].(string) < older["fired_at"].(string) {
		t.Fatalf("fires: %v; want schedule h, newest first", fires)
	}
	if all := mustOp(t, h, opScheduleFires, `{"limit": 0}`)["fires"].([]any); len(all) != 3 {
		t.Fatalf("every fire of every schedule: %v", all)
	}
	if out, rc := dispatch(h, []byte(`{"limit": -1}`), opScheduleFires); rc != rcBadRequest {
		t.Fatalf("a negative limit: rc %d %s", rc, out)
	}
}
