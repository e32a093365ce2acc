package main

import (
	"fmt"
	"strings"
	"testing"
)

// A report's lines keep their stream, and a logging record its level and logger, on the step
// record (what an in-process Python tool printed or logged, docs/reference/python/README.md); a stream that is
// not one of stdout, stderr, log is refused with a message naming the field.
func TestCallReportStreams(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opToolRegister, `{"name": "chatty", "lane": "main"}`)
	runID := mustOp(t, h, opRunSubmit, `{"spec": "steps: [{id: c, tool: chatty}]"}`)["run_id"].(string)
	calls := mustOp(t, h, opCallsNext, fmt.Sprintf(`{"lanes": ["main"], "max": 1, "timeout_ms": 5000, "run_id": %q}`, runID))["calls"].([]any)
	if len(calls) != 1 {
		t.Fatalf("calls %v", calls)
	}
	id := calls[0].(map[string]any)["call_id"]
	out, rc := dispatch(h, []byte(fmt.Sprintf(`{"call_id": %v, "logs": [{"message": "x", "stream": "stdin"}]}`, id)), opCallReport)
	if rc == rcOK || !strings.Contains(string(out), `"code":"invalid_input"`) || !strings.Contains(string(out), "logs[0].stream") {
		t.Fatalf("a bad stream: rc %d %s", rc, out)
	}
	rep := mustOp(t, h, opCallReport, fmt.Sprintf(`{"call_id": %v, "logs": [
		{"message": "hello from print", "stream": "stdout"},
		{"message": "careful", "stream": "stderr"},
		{"message": "disk slow", "stream": "log", "level": "WARNING", "logger": "studio.export"},
		{"message": "cached frame", "fields": {"frame": 37}}]}`, id))
	if rep["accepted"] != true {
		t.Fatalf("report %v", rep)
	}
	mustOp(t, h, opCallsComplete, fmt.Sprintf(`{"call_id": %v, "output": 1}`, id))
	st := mustOp(t, h, opRunWait, fmt.Sprintf(`{"run_id": %q, "timeout_ms": 5000, "all_steps": true}`, runID))
	logs := st["steps"].([]any)[0].(map[string]any)["logs"].([]any)
	got := ""
	for _, l := range logs {
		m := l.(map[string]any)
		got += fmt.Sprintf("%v|%v|%v|%v|%v;", m["stream"], m["level"], m["logger"], m["text"], m["fields"])
	}
	want := "stdout|<nil>|<nil>|hello from print|<nil>;stderr|<nil>|<nil>|careful|<nil>;" +
		"log|WARNING|studio.export|disk slow|<nil>;log|<nil>|<nil>|cached frame|map[frame:37];"
	if got != want {
		t.Fatalf("logs\n got %s\nwant %s", got, want)
	}
}
