package spec

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the expected values of testdata/golden/shared_rules.json from Go")

// sharedRulesPath is the golden table of the rules the Python package repeats (canonical JSON,
// retry delays, retryable kinds, name rules). tests/py/test_shared_rules.py reads the same file,
// so a change to either side that makes them differ fails a test.
var sharedRulesPath = filepath.Join("..", "..", "testdata", "golden", "shared_rules.json")

// sharedRules is the whole file; engine/run's test decodes only the part it owns.
type sharedRules struct {
	Comment       []string `json:"comment"`
	CanonicalJSON []struct {
		In  string `json:"in"`
		Out string `json:"out"`
	} `json:"canonical_json"`
	RetryDelayMs []struct {
		Backoff        Backoff `json:"backoff"`
		Multiplier     float64 `json:"multiplier,omitempty"` // 0: not set (the default 2)
		InitialDelayMs int64   `json:"initial_delay_ms"`
		MaxDelayMs     int64   `json:"max_delay_ms"`
		Attempt        int     `json:"attempt"`
		DelayMs        int64   `json:"delay_ms"`
	} `json:"retry_delay_ms"`
	Retryable []struct {
		Kind      string   `json:"kind"`
		RetryOn   []string `json:"retry_on"` // null: the default rule; [] retries nothing
		Retryable bool     `json:"retryable"`
	} `json:"retryable"`
	Names []struct {
		Name     string `json:"name"`
		ToolName bool   `json:"tool_name"` // a valid tool name
		ID       bool   `json:"id"`        // a valid step id, input, foreach as, dcc or pool name
		Reserved bool   `json:"reserved"`  // a reserved template root
	} `json:"names"`
}

// TestSharedRules checks Go against the golden table (go test -run TestSharedRules -update
// rewrites its expected values from Go; the inputs stay as written).
func TestSharedRules(t *testing.T) {
	raw, err := os.ReadFile(sharedRulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules sharedRules
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("%s: %v", sharedRulesPath, err)
	}
	if len(rules.CanonicalJSON) == 0 || len(rules.RetryDelayMs) == 0 || len(rules.Retryable) == 0 || len(rules.Names) == 0 {
		t.Fatalf("%s: a section is empty", sharedRulesPath)
	}
	for i := range rules.CanonicalJSON {
		c := &rules.CanonicalJSON[i]
		v, err := DecodeValue([]byte(c.In))
		if err != nil {
			t.Fatalf("canonical_json[%d] %s: %v", i, c.In, err)
		}
		got, err := CanonicalValue(v)
		if err != nil {
			t.Fatalf("canonical_json[%d] %s: %v", i, c.In, err)
		}
		if *update {
			c.Out = string(got)
		} else if string(got) != c.Out {
			t.Errorf("canonical_json[%d] %s: Go gives %s, the table %s", i, c.In, got, c.Out)
		}
	}
	for i := range rules.RetryDelayMs {
		c := &rules.RetryDelayMs[i]
		r := RetryPolicy{MaxAttempts: 2, Backoff: c.Backoff, Multiplier: c.Multiplier, InitialDelayMs: c.InitialDelayMs, MaxDelayMs: c.MaxDelayMs}
		got := r.NextDelayMs(c.Attempt)
		if *update {
			c.DelayMs = got
		} else if got != c.DelayMs {
			t.Errorf("retry_delay_ms[%d] %s ×%v %d/%d ms attempt %d: Go gives %d, the table %d",
				i, c.Backoff, c.Multiplier, c.InitialDelayMs, c.MaxDelayMs, c.Attempt, got, c.DelayMs)
		}
	}
	for i := range rules.Retryable {
		c := &rules.Retryable[i]
		r := DefaultRetryPolicy()
		r.RetryOn = c.RetryOn
		got := r.IsRetryable(c.Kind)
		if *update {
			c.Retryable = got
		} else if got != c.Retryable {
			list := "null"
			if c.RetryOn != nil {
				list = fmt.Sprintf("%q", c.RetryOn)
			}
			t.Errorf("retryable[%d] kind %q retry_on %s: Go gives %v, the table %v", i, c.Kind, list, got, c.Retryable)
		}
	}
	for i := range rules.Names {
		c := &rules.Names[i]
		tool, id, reserved := IsValidToolName(c.Name), identRe.MatchString(c.Name), IsReservedRoot(c.Name)
		if *update {
			c.ToolName, c.ID, c.Reserved = tool, id, reserved
		} else if tool != c.ToolName || id != c.ID || reserved != c.Reserved {
			t.Errorf("names[%d] %q: Go gives tool_name %v, id %v, reserved %v; the table %v, %v, %v",
				i, c.Name, tool, id, reserved, c.ToolName, c.ID, c.Reserved)
		}
	}
	if *update {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rules); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sharedRulesPath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
