package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// A spec text parsed again with the same format and source is taken from the cache; another
// source, another format or other text is parsed on its own; text that fails to parse is never
// kept; the oldest entry goes when more distinct texts come than the cache holds.
func TestSpecCacheKeepsTheParseOfRecentTexts(t *testing.T) {
	var c specCache
	text := []byte(`{"name":"a","steps":[{"id":"s","tool":"t"}]}`)
	first, err := c.parse(text, spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.parse(append([]byte(nil), text...), spec.Options{}); err != nil || again != first {
		t.Fatalf("the same text was parsed again (%v)", err)
	}
	if other, err := c.parse(text, spec.Options{Source: "a.json"}); err != nil || other == first || other.Source() != "a.json" {
		t.Fatalf("another source shared the parse (%v)", err)
	}
	if other, err := c.parse(text, spec.Options{Format: spec.FormatJSON}); err != nil || other == first {
		t.Fatalf("another format shared the parse (%v)", err)
	}
	bad := []byte(`{"name":"a","steps":[{"id":"s","tool":"t","bogus":1}]}`)
	for range 2 {
		if s, err := c.parse(bad, spec.Options{}); err == nil {
			t.Fatalf("an unknown field was taken: %v", s)
		}
	}
	for i := range len(c.entries) {
		if _, err := c.parse([]byte(fmt.Sprintf(`{"name":"b%d","steps":[{"id":"s","tool":"t"}]}`, i)), spec.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := c.parse(text, spec.Options{}); err != nil || again == first {
		t.Fatalf("the oldest text was not let go (%v)", err)
	}
}

// Runs of one spec text submitted at once share its parse and each ends with its own outputs:
// a parsed spec holds no state of a run (run under -race by make test-race).
func TestRunsOfOneSpecTextShareItsParse(t *testing.T) {
	t.Parallel()
	h := openEngine(t)
	mustOp(t, h, opToolRegister, `{"name": "add_one", "lane": "main"}`)
	text := `{"name":"chain","steps":[{"id":"s0","tool":"add_one","args":{"x":"{{inputs.x}}"}},{"id":"s1","tool":"add_one","args":{"x":"{{s0}}"}}]}`
	const runs = 8
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, _ := json.Marshal(map[string]any{"spec": text, "inputs": map[string]any{"x": i * 10}})
			runID := mustOp(t, h, opRunSubmit, string(sub))["run_id"].(string)
			next := fmt.Sprintf(`{"lanes":["main"],"max":1,"timeout_ms":5000,"run_id":%q}`, runID)
			res := mustOp(t, h, opCallsNext, next)
			for n := 0; n < 2; n++ {
				calls, _ := res["calls"].([]any)
				if len(calls) != 1 {
					errs <- fmt.Errorf("run %d: calls %v", i, res)
					return
				}
				call := calls[0].(map[string]any)
				x := call["args"].(map[string]any)["x"].(float64)
				res = mustOp(t, h, opCallsComplete, fmt.Sprintf(`{"call_id":%d,"output":%d,"next":%s}`, int64(call["call_id"].(float64)), int64(x)+1, next))
			}
			st := mustOp(t, h, opRunWait, fmt.Sprintf(`{"run_id":%q,"timeout_ms":5000}`, runID))
			if out := st["outputs"].(map[string]any)["s1"]; st["status"] != "completed" || out != float64(i*10+2) {
				errs <- fmt.Errorf("run %d: %v, s1 = %v", i, st["status"], out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
