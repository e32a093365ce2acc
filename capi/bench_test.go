package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func mustOp(tb testing.TB, h uint64, fn op, in string) map[string]any {
	tb.Helper()
	out, rc := dispatch(h, []byte(in), fn)
	if rc != rcOK {
		tb.Fatalf("rc %d: %s", rc, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkHostStepRoundTrip drives a sequential foreach of host tool calls the way Python does:
// one calls_complete (with next) crossing per step, JSON included.
func BenchmarkHostStepRoundTrip(b *testing.B) {
	h := uint64(mustOp(b, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
	defer dispatch(h, nil, opEngineClose)
	mustOp(b, h, opToolRegister, `{"name": "noop", "lane": "main"}`)
	items := make([]string, b.N)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	specText := `{"name":"seq","steps":[{"id":"each","kind":"foreach","items":"{{inputs.items}}","steps":[{"id":"noop","tool":"noop"}]}]}`
	sub, _ := json.Marshal(map[string]any{"spec": specText, "inputs": map[string]any{"items": json.RawMessage("[" + strings.Join(items, ",") + "]")}})
	runID := mustOp(b, h, opRunSubmit, string(sub))["run_id"].(string)
	nextReq := fmt.Sprintf(`{"lanes":["main"],"max":16,"timeout_ms":1000,"run_id":%q}`, runID)
	b.ResetTimer()
	res := mustOp(b, h, opCallsNext, nextReq)
	done := 0
	for done < b.N {
		calls, _ := res["calls"].([]any)
		if len(calls) == 0 {
			if run, _ := res["run"].(map[string]any); run["terminal"] == true {
				break
			}
			res = mustOp(b, h, opCallsNext, nextReq)
			continue
		}
		id := calls[0].(map[string]any)["call_id"].(float64)
		res = mustOp(b, h, opCallsComplete, fmt.Sprintf(`{"call_id":%d,"output":null,"next":%s}`, int64(id), nextReq))
		done++
	}
	b.StopTimer()
	if done != b.N {
		b.Fatalf("completed %d of %d calls", done, b.N)
	}
}

// BenchmarkDispatchSmall measures the fixed cost of one small JSON export on the Go side.
func BenchmarkDispatchSmall(b *testing.B) {
	h := uint64(mustOp(b, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
	defer dispatch(h, nil, opEngineClose)
	in := []byte(`{"call_id":5}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dispatch(h, in, opCallCancelled)
	}
}
