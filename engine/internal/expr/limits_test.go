package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// tree returns a complete binary tree of the given depth: 2^depth - 1 objects {"l":…, "r":…}.
func tree(depth int) any {
	if depth == 1 {
		return map[string]any{"leaf": true}
	}
	return map[string]any{"l": tree(depth - 1), "r": tree(depth - 1)}
}

// TestRedteamChainedDescendantsStopAtTheLimit: "$..*..*..*..*..*" over a 511-node tree took 8 s
// and 1.6 GB with theory/jsonpath's Select (six over 4,095 nodes passed 7.8 GB). Within the
// default limits it stops in well under a second with a *LimitError, holding little memory.
func TestRedteamChainedDescendantsStopAtTheLimit(t *testing.T) {
	var chain any = []any{1.0}
	for range 511 {
		chain = []any{chain}
	}
	doc := map[string]any{"t": tree(12), "chain": chain}
	// The library took 71 s to give the 22,238,720 nodes of the third one.
	for _, s := range []string{"$.t..*..*..*..*..*..*", "$.chain..*..*..*", "$.t[*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*][*,*,*,*]"} {
		p := mustCompile(t, s)
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start, startCPU := time.Now(), cpuTime()
		v, err := p.SelectLimited(doc, Limits{})
		took, cpu := time.Since(start), cpuTime()-startCPU
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		var le *LimitError
		if !errors.As(err, &le) || v != nil {
			t.Fatalf("%s: got (%T, %v), want a *LimitError", s, v, err)
		}
		if le.Expr != s || (le.Limit != "results" && le.Limit != "work") {
			t.Fatalf("%s: %+v", s, le)
		}
		t.Logf("%s: %v after %v (%v of CPU), %d MB allocated", s, err, took, cpu, (after.TotalAlloc-before.TotalAlloc)>>20)
		// The bound is on the CPU time the evaluation used (this test is not parallel: nothing
		// else runs in the process), not the wall time, which a loaded machine stretches: 8.2 s
		// of wall time once in a make test beside other builds, for about 1.4 s of CPU.
		if cpu > 8*time.Second { // about 0.4 s, 1.4 s with the race detector
			t.Errorf("%s: used %v of CPU (%v of wall time), want about a second", s, cpu, took)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 400<<20 {
			t.Errorf("%s: allocated %d MB, want < 400 MB", s, alloc>>20)
		}
	}
	if mustCompile(t, "$.chain..*..*..*").Select(doc) != nil {
		t.Errorf("Select past the limit is not nil")
	}
	// Small limits stop small evaluations, and name the limit.
	_, err := mustCompile(t, "$..*").SelectLimited(doc, Limits{MaxResults: 100})
	if err == nil || err.Error() != `JSONPath "$..*" selects more than 100 nodes` {
		t.Fatalf("MaxResults 100: %v", err)
	}
	_, err = mustCompile(t, "$.t..leaf").SelectLimited(doc, Limits{MaxWork: 1000})
	if err == nil || !strings.Contains(err.Error(), "more than 1,000 units of work") {
		t.Fatalf("MaxWork 1000: %v", err)
	}
	if v, err := mustCompile(t, "$.t..leaf").SelectLimited(doc, Limits{MaxWork: 50000}); err != nil || len(v.([]any)) != 2048 {
		t.Fatalf("MaxWork 50000: %v", err)
	}
}

// TestRedteamFilterQueriesMultiplyOnce: a query inside a filter runs once per candidate, so
// Compile refuses one with two multiplying segments, and the cost of a multiplying one is
// charged per candidate: "$..[?@..*]" over a deep chain stops at the work limit.
func TestRedteamFilterQueriesMultiplyOnce(t *testing.T) {
	for _, s := range []string{"$[?@..*..*]", "$[?@..a['x','y']]", "$[?count(@['a','b']['c','d']) > 1]", "$[?@['a','b'][?@..x]]", "$[?$..a..b]", "$[?@[?$..x]]"} {
		_, err := Compile(s)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, "inside a filter") {
			t.Errorf("Compile(%q) = %v, want a multiplying-query error", s, err)
		}
	}
	for _, s := range []string{"$..[?@..x]", "$..[?@..*]", "$[?count(@.*) > 1 && count(@.a[*][*]) > 0]", `$[?@["a:b"] == 'c:d']`,
		"$[?@.a[?@.x > 1]]", "$[?$..a && @.b[0:2]]", "$[?@[?@..x]]", "$[?@[?$.flag]]", "$[?value(@..x) == 1]"} {
		if _, err := Compile(s); err != nil {
			t.Errorf("Compile(%q): %v", s, err)
		}
	}
	// A chain 2,000 deep: every candidate's "@..*" walks what is below it.
	var chain any = map[string]any{"x": 1.0}
	for range 2000 {
		chain = []any{chain}
	}
	start := time.Now()
	_, err := mustCompile(t, "$..[?@..*]").SelectLimited(chain, Limits{MaxWork: 100_000})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "work" {
		t.Fatalf("got %v, want the work limit", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestSelectLimitedMatchesTheLibrary: within the limits, the evaluator selects what the library
// selects (as a multiset: object members come in no fixed order).
func TestSelectLimitedMatchesTheLibrary(t *testing.T) {
	t.Parallel()
	doc := runDoc(t)
	doc["t"] = tree(4)
	doc["mixed"] = []any{nil, true, 1.0, "s", []any{}, map[string]any{"x": []any{1.0, map[string]any{"x": 2.0}}}, []string{"a", "b"}}
	for _, s := range []string{
		"$", "$.list.files", "$.list.files[*].path", "$..path", "$..*", "$..x", "$.t..*", "$..[0]", "$..[-1]",
		"$.a[?@.x > 1]", "$.a[?@.x]", "$..[?@.x]", "$['a','list'][0:2:-1]", "$.a[1:4]", "$.a[::-1].x", "$..[?@.x == 2]",
		"$.list.files[?match(@.name, 'a.*')].path", "$[?length(@) == count(@.*)]", "$.mixed..x", "$.mixed[*]",
		"$..[?count(@.*) > 1]", "$..[?$.flag == false]", "$.t..[?@.leaf]", "$..*..x", "$.t..l..r", "$['list','list'].files[0]",
		"$.a[?@.x > 1 || @.y][*]", "$.steps[?@.status == 'completed'].output", "$.mixed[6][*]", "$[*][*][*]",
	} {
		p := mustCompile(t, s)
		got, err := p.nodes(doc, Limits{})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		want := p.q.Select(doc)
		if key(t, got) != key(t, []any(want)) {
			t.Errorf("%s:\n got %s\nwant %s", s, key(t, got), key(t, []any(want)))
		}
	}
}

func key(t *testing.T, nodes []any) string {
	t.Helper()
	var parts []string
	for _, n := range nodes {
		b, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(b))
	}
	slices.Sort(parts)
	return fmt.Sprint(len(parts), parts)
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
