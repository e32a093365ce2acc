package openlineage

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

func mustMarshal(t testing.TB, c Config, ev Event) []byte {
	t.Helper()
	data, warning, err := Marshal(c, ev)
	if err != nil {
		t.Fatal(err)
	}
	if warning != nil {
		t.Fatalf("warning: %v", warning)
	}
	return data
}

var when = time.Date(2026, 11, 29, 8, 30, 0, 123456789, time.FixedZone("CET", 3600))

func sampleEvent(typ string) Event {
	return Event{
		Type: typ, Time: when, RunID: "r-20261129-0001", StepKey: "per_shot[2].render", Attempt: 2,
		Workflow: "shot_publish", Tool: "maya__export_abc", ParentRunID: "r-parent",
		Inputs: []Dataset{
			{Path: "/mnt/show/sh010/anim.ma", Hash: "blake3:" + strings.Repeat("ab", 32), Size: 1234},
			{Path: `\\filer01\show\sh010\cam.abc`, Hash: "blake3:" + strings.Repeat("cd", 32), Size: 99},
			{Path: `C:\show\sh010\layout.usd`, Hash: "", Size: 0}, // not hashed (missing)
		},
		Outputs: []Dataset{{Path: "/mnt/show/sh010/render.abc", Hash: "blake3:" + strings.Repeat("ef", 32), Size: 1 << 30}},
		Env:     map[string]any{"dcc": "maya", "version": "2025.3", "plugins": map[string]any{"mtoa": "5.4.2", "bifrost": 2.11}},
	}
}

func TestEventContent(t *testing.T) {
	cfg := Config{URL: "http://127.0.0.1:1/api/v1/lineage", Namespace: "studio-prod", Producer: "https://example.com/dcc-flow/v0.1.0"}
	ev := validateEvent(t, mustMarshal(t, cfg, sampleEvent(Complete)))
	get := func(path ...string) any {
		var cur any = ev
		for _, p := range path {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[p]
			case []any:
				var i int
				for j := range p {
					i = i*10 + int(p[j]-'0')
				}
				cur = c[i]
			}
		}
		return cur
	}
	want := map[string]any{
		"eventType":                                  "COMPLETE",
		"eventTime":                                  "2026-11-29T07:30:00.123456789Z",
		"producer":                                   "https://example.com/dcc-flow/v0.1.0",
		"job.namespace":                              "studio-prod",
		"job.name":                                   "shot_publish.per_shot[2].render",
		"run.runId":                                  AttemptUUID("r-20261129-0001", "per_shot[2].render", 2),
		"run.facets.parent.run.runId":                RunUUID("r-20261129-0001"),
		"run.facets.parent.job.name":                 "shot_publish",
		"run.facets.parent.job.namespace":            "studio-prod",
		"run.facets.parent._producer":                "https://example.com/dcc-flow/v0.1.0",
		"run.facets.dccFlow_attempt.runId":           "r-20261129-0001",
		"run.facets.dccFlow_attempt.stepKey":         "per_shot[2].render",
		"run.facets.dccFlow_attempt.attempt":         2.0,
		"run.facets.dccFlow_attempt.tool":            "maya__export_abc",
		"run.facets.dccFlow_attempt.parentRunId":     "r-parent",
		"run.facets.dccFlow_attempt.environment.dcc": "maya",
		"run.facets.dccFlow_attempt.environment.plugins.bifrost": 2.11,
		"job.facets.jobType.integration":                         "DCC_FLOW",
		"inputs.0.namespace":                                     "file",
		"inputs.0.name":                                          "/mnt/show/sh010/anim.ma",
		"inputs.0.facets.version.datasetVersion":                 "blake3:" + strings.Repeat("ab", 32),
		"inputs.0.inputFacets.inputStatistics.size":              1234.0,
		"inputs.0.inputFacets.inputStatistics.fileCount":         1.0,
		"inputs.1.namespace":                                     "file://filer01",
		"inputs.1.name":                                          "/show/sh010/cam.abc",
		"inputs.2.namespace":                                     "file",
		"inputs.2.name":                                          "C:/show/sh010/layout.usd",
		"inputs.2.facets.version":                                nil, // not hashed: no version
		"outputs.0.name":                                         "/mnt/show/sh010/render.abc",
		"outputs.0.outputFacets.outputStatistics.size":           float64(1 << 30),
		"run.facets.errorMessage":                                nil, // COMPLETE: none
	}
	for path, w := range want {
		if got := get(strings.Split(path, ".")...); got != w {
			t.Errorf("%s = %#v, want %#v", path, got, w)
		}
	}

	fail := sampleEvent(Fail)
	fail.ErrorMessage = "boom"
	fail.ErrorTrace = "Traceback (most recent call last):\n  File \"t.py\", line 1\n"
	ev = validateEvent(t, mustMarshal(t, cfg, fail))
	em := ev["run"].(map[string]any)["facets"].(map[string]any)["errorMessage"].(map[string]any)
	if em["message"] != "boom" || em["programmingLanguage"] != "python" || em["stackTrace"] != fail.ErrorTrace {
		t.Errorf("errorMessage facet: %v", em)
	}
	fail.ErrorMessage, fail.ErrorTrace = "", ""
	ev = validateEvent(t, mustMarshal(t, cfg, fail))
	em = ev["run"].(map[string]any)["facets"].(map[string]any)["errorMessage"].(map[string]any)
	if em["message"] != "attempt failed" || em["programmingLanguage"] != "unknown" || em["stackTrace"] != nil {
		t.Errorf("errorMessage facet without a message: %v", em)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestAttemptUUID(t *testing.T) {
	// The algorithm against RFC 9562's own example (appendix A.4: DNS namespace, www.example.com).
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got := uuid5(dns, "www.example.com"); got != "2ed6657d-e927-568b-95e1-2665a8aea6a2" {
		t.Fatalf("uuid5 of the RFC example = %s", got)
	}
	a := AttemptUUID("r1", "s", 1)
	if !uuidRE.MatchString(a) {
		t.Fatalf("%q is not a version 5 UUID", a)
	}
	// Pinned: a change would give every recorded attempt a new OpenLineage identity.
	if a != "3f96df90-5897-5f2d-9077-4e80c777f956" || RunUUID("r1") != "7acc169a-6eb2-529f-95c4-97b06986ba3d" {
		t.Fatalf("AttemptUUID(r1, s, 1) = %s, RunUUID(r1) = %s: the derivation changed", a, RunUUID("r1"))
	}
	seen := map[string]string{}
	for _, c := range []struct {
		run, step string
		n         int
	}{{"r1", "s", 1}, {"r1", "s", 2}, {"r1", "t", 1}, {"r2", "s", 1}, {"r1", "s\x001", 1}, {"r1\x00s", "", 1}} {
		u := AttemptUUID(c.run, c.step, c.n)
		if prev, dup := seen[u]; dup {
			t.Errorf("%v and %s share %s", c, prev, u)
		}
		seen[u] = c.run + "/" + c.step
	}
	if RunUUID("r1") == AttemptUUID("r1", "", 0) || !uuidRE.MatchString(RunUUID("r1")) {
		t.Error("RunUUID collides with an attempt or is not a UUID")
	}
	// START and COMPLETE of one attempt share the runId.
	s := validateEvent(t, mustMarshal(t, Config{}, sampleEvent(Start)))
	c := validateEvent(t, mustMarshal(t, Config{}, sampleEvent(Complete)))
	if s["run"].(map[string]any)["runId"] != c["run"].(map[string]any)["runId"] {
		t.Error("START and COMPLETE of one attempt have different runIds")
	}
}

func TestDatasetName(t *testing.T) {
	for _, c := range []struct{ path, ns, name string }{
		{"/mnt/show/a.usd", "file", "/mnt/show/a.usd"},
		{`C:\show\a.usd`, "file", "C:/show/a.usd"},
		{`c:/show/a.usd`, "file", "c:/show/a.usd"},
		{`\\server\share\dir\a.usd`, "file://server", "/share/dir/a.usd"},
		{`//server/share/a.usd`, "file://server", "/share/a.usd"},
		{`\\server`, "file://server", "/"},
		{`\\?\C:\long\a.usd`, "file", `\\?\C:\long\a.usd`},
		{"relative/a.usd", "file", "relative/a.usd"},
		{"///x", "file", "///x"},
	} {
		ns, name := DatasetName(c.path)
		if ns != c.ns || name != c.name {
			t.Errorf("DatasetName(%q) = %q, %q; want %q, %q", c.path, ns, name, c.ns, c.name)
		}
	}
}

func TestDatasetsDedupedAndEmptySkipped(t *testing.T) {
	ev := Event{Type: Complete, RunID: "r", StepKey: "s", Attempt: 1,
		Inputs: []Dataset{{Path: "/a"}, {Path: ""}, {Path: "/a", Hash: "blake3:x"}, {Path: `\\h\s\b`}, {Path: "//h/s/b"}}}
	got := validateEvent(t, mustMarshal(t, Config{}, ev))
	in := got["inputs"].([]any)
	if len(in) != 2 || in[0].(map[string]any)["name"] != "/a" || in[1].(map[string]any)["name"] != "/s/b" {
		t.Fatalf("inputs: %v", in)
	}
	if out := got["outputs"].([]any); len(out) != 0 {
		t.Fatalf("outputs: %v", out)
	}
}

func TestMarshalRejectsEventsThatNameNoAttempt(t *testing.T) {
	for _, c := range []struct {
		ev   Event
		want string
	}{
		{Event{Type: "DONE", RunID: "r", StepKey: "s"}, `event type "DONE" of step "s": use START, COMPLETE or FAIL`},
		{Event{Type: "start", RunID: "r", StepKey: "s"}, `event type "start"`},
		{Event{Type: Start, StepKey: "s"}, `run id "", step key "s"`},
		{Event{Type: Start, RunID: "r"}, `step key ""`},
		{Event{Type: Start, RunID: "r", StepKey: "s", Attempt: -1}, "attempt -1: attempts count from 1"},
	} {
		_, _, err := Marshal(Config{}, c.ev)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.ev, err, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{URL: "http://localhost:5000/api/v1/lineage"}, ""},
		{Config{URL: "https://lineage.example.com/api/v1/lineage", File: "/tmp/x.jsonl"}, ""},
		{Config{File: "events.jsonl", Namespace: "prod", Timeout: time.Second, QueueSize: 10, Producer: "https://example.com/p"}, ""},
		{Config{}, "neither url nor file is set: set url to an HTTP endpoint"},
		{Config{URL: "  ", File: ""}, "neither url nor file is set"},
		{Config{URL: "ftp://host/x"}, `url "ftp://host/x" has scheme "ftp": use http:// or https://`},
		{Config{URL: "localhost:5000/api"}, `has scheme "localhost": use http://`},
		{Config{URL: "/api/v1/lineage"}, `has scheme "": use http://`},
		{Config{URL: "http:///api"}, "has no host"},
		{Config{URL: "http://a b/"}, "does not parse"},
		{Config{URL: "http://user:hunter2@[::1/"}, "does not parse"},
		{Config{File: "a\x00b"}, "file contains a NUL byte"},
		{Config{File: "x", Namespace: "  "}, "namespace is blank"},
		{Config{File: "x", Timeout: -time.Second}, "timeout is -1s: give a positive duration"},
		{Config{File: "x", QueueSize: -1}, "queue_size is -1"},
		{Config{File: "x", Producer: "dcc-flow"}, `producer "dcc-flow" is not an absolute URI`},
		{Config{File: "x", APIKey: "k"}, "api_key is set without url"},
		{Config{URL: "http://h/", APIKey: "k\r\nX-Evil: 1"}, "api_key contains a line break"},
		{Config{URL: "http://h/", APIKey: "k"}, ""},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%+v: the password is in the message: %v", c.cfg, err)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New accepted an empty config")
	}
}

// guideExample is the event docs/guide/openlineage.md shows; testdata/example_complete.json
// is its encoding, indented. Regenerate the file with OPENLINEAGE_UPDATE=1 (and paste it into
// the guide) when the encoding changes on purpose.
func guideExample() Event {
	return Event{
		Type: Complete, Time: time.Date(2026, 11, 29, 8, 30, 12, 0, time.UTC),
		RunID: "r-7f3a", StepKey: "export", Attempt: 1, Workflow: "shot_publish", Tool: "maya__export_abc",
		Inputs: []Dataset{
			{Path: "/mnt/show/sh010/anim_v012.ma", Hash: "blake3:" + strings.Repeat("3f", 32), Size: 48213507},
			{Path: `\\filer01\show\sh010\camera.abc`, Hash: "blake3:" + strings.Repeat("a0", 32), Size: 90211},
		},
		Outputs: []Dataset{{Path: "/mnt/show/sh010/publish/anim_v012.abc", Hash: "blake3:" + strings.Repeat("c7", 32), Size: 310544321}},
		Env:     map[string]any{"dcc": "maya", "version": "2025.3", "plugins": map[string]any{"AbcExport": "1.0", "mtoa": "5.4.2"}},
	}
}

func TestTheGuideExampleIsWhatMarshalWrites(t *testing.T) {
	data := mustMarshal(t, Config{}, guideExample())
	validateEvent(t, data)
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, data, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	const golden = "testdata/example_complete.json"
	if os.Getenv("OPENLINEAGE_UPDATE") != "" {
		if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Fatalf("Marshal wrote\n%s\nwant (%s)\n%s", pretty.Bytes(), golden, want)
	}
	guide, err := os.ReadFile("../../../docs/guide/openlineage.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(guide, want) {
		t.Errorf("docs/guide/openlineage.md does not show %s verbatim", golden)
	}
	// The guide's FAIL facet.
	fail := guideExample()
	fail.Type, fail.ErrorMessage = Fail, "RuntimeError: no camera named shotCam"
	fail.ErrorTrace = "Traceback (most recent call last):\n  File \"tools.py\", line 41, in export_abc\nRuntimeError: no camera named shotCam\n"
	ev := validateEvent(t, mustMarshal(t, Config{}, fail))
	facet, _ := json.MarshalIndent(ev["run"].(map[string]any)["facets"].(map[string]any)["errorMessage"], "", "  ")
	if !bytes.Contains(guide, append([]byte(`"errorMessage": `), facet...)) {
		t.Errorf("docs/guide/openlineage.md does not show the errorMessage facet\n%s", facet)
	}
}
