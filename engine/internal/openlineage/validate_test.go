package openlineage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// How events are checked (testdata/README.md says why):
//
//   - always, against eventShape: this package's own statement of what Marshal writes (every
//     field it writes, its type and format, no other field, each facet under its key with its
//     _schemaURL), and the dccFlow_attempt facet against this package's own schema
//     (facets/1-0-0/DccFlowAttemptRunFacet.json);
//   - in tests/py/test_openlineage_events.py, by structuring the events the engine writes into
//     the RunEvent classes of the OpenLineage Python client (the spec's generated model);
//   - always, against the published OpenLineage JSON schemas: the copies in
//     testdata/openlineage-spec (the spec's OpenLineage.json and the facet schemas event.go
//     stamps, unchanged, from the OpenLineage repository; testdata/README.md names the commit),
//     or a checkout of the specification that DCCFLOW_OPENLINEAGE_SPEC names (to check against
//     a newer spec).

// specEnv names the environment variable that points at a checkout of the specification; unset,
// the copies in specCopy are used.
const specEnv = "DCCFLOW_OPENLINEAGE_SPEC"

// specCopy holds the published schemas this package's events are checked against: unchanged
// copies of the spec's files (testdata/README.md says from which commit).
const specCopy = "testdata/openlineage-spec"

// eventShape is a JSON Schema (draft 2020-12) of the events Marshal writes, written for these
// tests from the OpenLineage spec 2-0-2 and the facet versions event.go stamps. It is stricter
// than the spec where Marshal is (no additional properties, each facet's _schemaURL fixed).
var eventShape = strings.NewReplacer(
	"RUN_EVENT_URL", RunEventSchemaURL,
	"PARENT_URL", parentRunSchemaURL,
	"ERROR_URL", errorMessageSchemaURL,
	"ATTEMPT_URL", AttemptFacetSchemaURL,
	"JOB_TYPE_URL", jobTypeSchemaURL,
	"VERSION_URL", datasetVersionURL,
	"INPUT_STATS_URL", inputStatisticsURL,
	"OUTPUT_STATS_URL", outputStatisticsURL,
).Replace(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["eventType", "eventTime", "run", "job", "inputs", "outputs", "producer", "schemaURL"],
  "properties": {
    "eventType": {"enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
    "eventTime": {"type": "string", "format": "date-time"},
    "producer": {"type": "string", "format": "uri"},
    "schemaURL": {"const": "RUN_EVENT_URL"},
    "run": {
      "type": "object", "additionalProperties": false, "required": ["runId", "facets"],
      "properties": {
        "runId": {"type": "string", "format": "uuid"},
        "facets": {
          "type": "object", "additionalProperties": false,
          "properties": {
            "parent": {"$ref": "#/$defs/parent"},
            "errorMessage": {"$ref": "#/$defs/errorMessage"},
            "dccFlow_attempt": {"$ref": "#/$defs/facet", "properties": {"_schemaURL": {"const": "ATTEMPT_URL"}}}
          }
        }
      }
    },
    "job": {
      "type": "object", "additionalProperties": false, "required": ["namespace", "name", "facets"],
      "properties": {
        "namespace": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "facets": {"type": "object", "additionalProperties": false, "properties": {"jobType": {"$ref": "#/$defs/jobType"}}}
      }
    },
    "inputs": {"type": "array", "items": {"$ref": "#/$defs/dataset", "unevaluatedProperties": false, "required": ["inputFacets"],
      "properties": {"inputFacets": {"type": "object", "additionalProperties": false,
        "properties": {"inputStatistics": {"$ref": "#/$defs/statistics", "properties": {"_schemaURL": {"const": "INPUT_STATS_URL"}}}}}}}},
    "outputs": {"type": "array", "items": {"$ref": "#/$defs/dataset", "unevaluatedProperties": false, "required": ["outputFacets"],
      "properties": {"outputFacets": {"type": "object", "additionalProperties": false,
        "properties": {"outputStatistics": {"$ref": "#/$defs/statistics", "properties": {"_schemaURL": {"const": "OUTPUT_STATS_URL"}}}}}}}}
  },
  "$defs": {
    "facet": {
      "type": "object", "required": ["_producer", "_schemaURL"],
      "properties": {"_producer": {"type": "string", "format": "uri"}, "_schemaURL": {"type": "string", "format": "uri"}}
    },
    "parent": {
      "$ref": "#/$defs/facet", "unevaluatedProperties": false, "required": ["run", "job"],
      "properties": {
        "_schemaURL": {"const": "PARENT_URL"},
        "run": {"type": "object", "additionalProperties": false, "required": ["runId"], "properties": {"runId": {"type": "string", "format": "uuid"}}},
        "job": {"type": "object", "additionalProperties": false, "required": ["namespace", "name"],
          "properties": {"namespace": {"type": "string", "minLength": 1}, "name": {"type": "string", "minLength": 1}}}
      }
    },
    "errorMessage": {
      "$ref": "#/$defs/facet", "unevaluatedProperties": false, "required": ["message", "programmingLanguage"],
      "properties": {
        "_schemaURL": {"const": "ERROR_URL"},
        "message": {"type": "string"}, "programmingLanguage": {"type": "string"}, "stackTrace": {"type": "string"}
      }
    },
    "jobType": {
      "$ref": "#/$defs/facet", "unevaluatedProperties": false, "required": ["processingType", "integration"],
      "properties": {
        "_schemaURL": {"const": "JOB_TYPE_URL"},
        "processingType": {"enum": ["BATCH", "STREAMING"]}, "integration": {"type": "string"}, "jobType": {"type": "string"}
      }
    },
    "statistics": {
      "$ref": "#/$defs/facet", "unevaluatedProperties": false,
      "properties": {
        "rowCount": {"type": "integer"}, "size": {"type": "integer", "minimum": 0}, "fileCount": {"type": "integer", "minimum": 0}
      }
    },
    "dataset": {
      "type": "object", "required": ["namespace", "name", "facets"],
      "properties": {
        "namespace": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "facets": {"type": "object", "additionalProperties": false, "properties": {"version": {
          "$ref": "#/$defs/facet", "unevaluatedProperties": false, "required": ["datasetVersion"],
          "properties": {"_schemaURL": {"const": "VERSION_URL"}, "datasetVersion": {"type": "string"}}}}}
      }
    }
  }
}`)

type checker struct {
	shape   *jsonschema.Schema // eventShape
	attempt *jsonschema.Schema // the own part of DccFlowAttemptRunFacet (allOf[1])
	// attemptKeys are the keys the facet may have: its own properties and the base facet's.
	attemptKeys map[string]bool

	// published checks against the published schemas (specCopy, or DCCFLOW_OPENLINEAGE_SPEC).
	published *publishedSpec
}

var (
	checkerOnce sync.Once
	theChecker  *checker
	checkerErr  error
)

func compileJSON(c *jsonschema.Compiler, id string, raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", id, err)
	}
	if err := c.AddResource(id, doc); err != nil {
		return nil, err
	}
	return c.Compile(id)
}

func getChecker(t testing.TB) *checker {
	t.Helper()
	checkerOnce.Do(func() {
		ch := &checker{}
		c := jsonschema.NewCompiler()
		c.AssertFormat() // uuid, date-time and uri are checked, not just annotated
		if ch.shape, checkerErr = compileJSON(c, "mem:///event-shape.json", []byte(eventShape)); checkerErr != nil {
			return
		}
		// The facet's own properties, without its allOf[0] (the spec's RunFacet, checked by
		// eventShape's "facet" here and by the published schema when there is one).
		raw, err := os.ReadFile("facets/1-0-0/DccFlowAttemptRunFacet.json")
		if err != nil {
			checkerErr = err
			return
		}
		var own struct {
			Defs struct {
				Facet struct {
					AllOf []json.RawMessage `json:"allOf"`
				} `json:"DccFlowAttemptRunFacet"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(raw, &own); err != nil || len(own.Defs.Facet.AllOf) != 2 {
			checkerErr = fmt.Errorf("facets/1-0-0/DccFlowAttemptRunFacet.json: want $defs.DccFlowAttemptRunFacet.allOf of 2 (%v)", err)
			return
		}
		if ch.attempt, checkerErr = compileJSON(c, "mem:///attempt-own.json", own.Defs.Facet.AllOf[1]); checkerErr != nil {
			return
		}
		var props struct {
			Properties map[string]any `json:"properties"`
		}
		_ = json.Unmarshal(own.Defs.Facet.AllOf[1], &props)
		ch.attemptKeys = map[string]bool{"_producer": true, "_schemaURL": true}
		for k := range props.Properties {
			ch.attemptKeys[k] = true
		}
		ch.published, checkerErr = loadPublishedSpec()
		theChecker = ch
	})
	if checkerErr != nil {
		t.Fatal(checkerErr)
	}
	return theChecker
}

// validateEvent checks data (checkEvent), failing t if it does not pass; it returns the
// decoded event.
func validateEvent(t testing.TB, data []byte) map[string]any {
	t.Helper()
	ev, err := checkEvent(t, data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return ev
}

// checkEvent checks data against eventShape, the dccFlow_attempt facet against its own schema,
// and the event and every facet against the published schemas; it returns the first problem.
func checkEvent(t testing.TB, data []byte) (map[string]any, error) {
	t.Helper()
	ch := getChecker(t)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("event is not JSON: %v", err)
	}
	if err := ch.shape.Validate(inst); err != nil {
		return nil, fmt.Errorf("event is not what Marshal writes: %v", err)
	}
	var ev map[string]any
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, err
	}
	if att, ok := ev["run"].(map[string]any)["facets"].(map[string]any)["dccFlow_attempt"]; ok {
		if err := ch.attempt.Validate(att); err != nil {
			return nil, fmt.Errorf("facet dccFlow_attempt does not validate against facets/1-0-0/DccFlowAttemptRunFacet.json: %v", err)
		}
		for k := range att.(map[string]any) {
			if !ch.attemptKeys[k] {
				return nil, fmt.Errorf("facet dccFlow_attempt has %q, a field facets/1-0-0/DccFlowAttemptRunFacet.json does not define", k)
			}
		}
	}
	if err := ch.published.check(t, data, ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// publishedSpec checks events against the published OpenLineage schemas (specCopy, or the
// checkout of the specification DCCFLOW_OPENLINEAGE_SPEC names) and this package's own facet
// schema.
type publishedSpec struct {
	dir   string
	c     *jsonschema.Compiler
	ids   map[string]bool            // the $id of every schema loaded
	keys  map[string]map[string]bool // schema $id → the facet keys its top-level properties define
	mu    sync.Mutex
	cache map[string]*jsonschema.Schema
}

// loadPublishedSpec loads specCopy, or the checkout DCCFLOW_OPENLINEAGE_SPEC names; it is an
// error when that names no checkout of the specification.
func loadPublishedSpec() (*publishedSpec, error) {
	dir := os.Getenv(specEnv)
	if dir == "" {
		dir = specCopy
	}
	if _, err := os.Stat(filepath.Join(dir, "spec", "OpenLineage.json")); err == nil {
		dir = filepath.Join(dir, "spec")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "OpenLineage.json"))
	facets, _ := filepath.Glob(filepath.Join(dir, "facets", "*.json"))
	own, _ := filepath.Glob("facets/*/*.json")
	if len(files) != 1 || len(facets) == 0 {
		return nil, fmt.Errorf("%s: no OpenLineage.json and facets/*.json there: give %s a checkout of "+
			"https://github.com/OpenLineage/OpenLineage (or its spec/ folder), or unset it", dir, specEnv)
	}
	p := &publishedSpec{dir: dir, c: jsonschema.NewCompiler(), ids: map[string]bool{}, keys: map[string]map[string]bool{}, cache: map[string]*jsonschema.Schema{}}
	p.c.AssertFormat()
	for _, f := range append(append(files, facets...), own...) {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var top struct {
			ID         string         `json:"$id"`
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(raw, &top); err != nil || top.ID == "" {
			return nil, fmt.Errorf("%s: no $id (%v)", f, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		if err := p.c.AddResource(top.ID, doc); err != nil {
			return nil, err
		}
		p.ids[top.ID] = true
		p.keys[top.ID] = map[string]bool{}
		for k := range top.Properties {
			p.keys[top.ID][k] = true
		}
	}
	return p, nil
}

func (p *publishedSpec) schema(url string) (*jsonschema.Schema, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.cache[url]; ok {
		return s, nil
	}
	s, err := p.c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile %s from %s: %v", url, p.dir, err)
	}
	p.cache[url] = s
	return s, nil
}

// check validates the event against RunEvent and every facet in it against the schema its
// _schemaURL names, under the key that schema defines.
func (p *publishedSpec) check(t testing.TB, data []byte, ev map[string]any) error {
	t.Helper()
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	s, err := p.schema(RunEventSchemaURL)
	if err != nil {
		return err
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("event does not validate against %s: %v", RunEventSchemaURL, err)
	}
	var bags []any
	bags = append(bags, ev["run"].(map[string]any)["facets"], ev["job"].(map[string]any)["facets"])
	for _, side := range []string{"inputs", "outputs"} {
		list, _ := ev[side].([]any)
		for _, d := range list {
			dm := d.(map[string]any)
			bags = append(bags, dm["facets"], dm["inputFacets"], dm["outputFacets"])
		}
	}
	for _, bag := range bags {
		m, _ := bag.(map[string]any)
		for name, f := range m {
			fm := f.(map[string]any)
			url, _ := fm["_schemaURL"].(string)
			if url == "" {
				return fmt.Errorf("facet %s has no _schemaURL", name)
			}
			raw, _ := json.Marshal(fm)
			finst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			fs, err := p.schema(url)
			if err != nil {
				return err
			}
			if err := fs.Validate(finst); err != nil {
				return fmt.Errorf("facet %s does not validate against %s: %v", name, url, err)
			}
			base, _, _ := strings.Cut(url, "#")
			if !p.keys[base][name] {
				return fmt.Errorf("facet key %s is not the one %s defines (%v)", name, base, p.keys[base])
			}
		}
	}
	return nil
}

// The checks have teeth: events broken in the ways a producer could break them fail them.
func TestValidatorRejectsBrokenEvents(t *testing.T) {
	good := mustMarshal(t, Config{}, sampleEvent(Fail))
	if _, err := checkEvent(t, good); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(ev map[string]any){
		"runId not a UUID":     func(ev map[string]any) { ev["run"].(map[string]any)["runId"] = "r-20261129-0001" },
		"eventTime not a time": func(ev map[string]any) { ev["eventTime"] = "yesterday" },
		"producer not a URI":   func(ev map[string]any) { ev["producer"] = "dcc flow" },
		"no job name":          func(ev map[string]any) { delete(ev["job"].(map[string]any), "name") },
		"unknown eventType":    func(ev map[string]any) { ev["eventType"] = "DONE" },
		"unknown field":        func(ev map[string]any) { ev["runId"] = "x" },
		"facet without _producer": func(ev map[string]any) {
			delete(ev["run"].(map[string]any)["facets"].(map[string]any)["parent"].(map[string]any), "_producer")
		},
		"errorMessage without programmingLanguage": func(ev map[string]any) {
			delete(ev["run"].(map[string]any)["facets"].(map[string]any)["errorMessage"].(map[string]any), "programmingLanguage")
		},
		"parent runId not a UUID": func(ev map[string]any) {
			ev["run"].(map[string]any)["facets"].(map[string]any)["parent"].(map[string]any)["run"] = map[string]any{"runId": "r1"}
		},
		"dccFlow_attempt without stepKey": func(ev map[string]any) {
			delete(ev["run"].(map[string]any)["facets"].(map[string]any)["dccFlow_attempt"].(map[string]any), "stepKey")
		},
		"dccFlow_attempt with an unknown field": func(ev map[string]any) {
			ev["run"].(map[string]any)["facets"].(map[string]any)["dccFlow_attempt"].(map[string]any)["attemptNo"] = 2
		},
		"dataset with an unknown field": func(ev map[string]any) {
			ev["outputs"].([]any)[0].(map[string]any)["inputFacets"] = map[string]any{}
		},
		"dccFlow_attempt attempt not a number": func(ev map[string]any) {
			ev["run"].(map[string]any)["facets"].(map[string]any)["dccFlow_attempt"].(map[string]any)["attempt"] = "2"
		},
		"dataset version not a string": func(ev map[string]any) {
			ev["inputs"].([]any)[0].(map[string]any)["facets"].(map[string]any)["version"].(map[string]any)["datasetVersion"] = 3
		},
		"statistics facet under the wrong key": func(ev map[string]any) {
			in := ev["inputs"].([]any)[0].(map[string]any)["inputFacets"].(map[string]any)
			in["outputStatistics"] = in["inputStatistics"]
		},
		"facet with another facet's _schemaURL": func(ev map[string]any) {
			ev["run"].(map[string]any)["facets"].(map[string]any)["errorMessage"].(map[string]any)["_schemaURL"] = parentRunSchemaURL
		},
	} {
		var ev map[string]any
		if err := json.Unmarshal(good, &ev); err != nil {
			t.Fatal(err)
		}
		edit(ev)
		bad, _ := json.Marshal(ev)
		if _, err := checkEvent(t, bad); err == nil {
			t.Errorf("%s: the broken event passes", name)
		}
	}
}

func TestEventsValidateAgainstThePublishedSchema(t *testing.T) {
	cfg := Config{File: "x"}
	fail := sampleEvent(Fail)
	fail.ErrorMessage = "export failed: no camera"
	fail.ErrorTrace = "Traceback (most recent call last):\n  File \"tools.py\", line 3, in export\nRuntimeError: no camera\n"
	unnamed := Event{Type: Start, RunID: "r1", StepKey: "a", Attempt: 1}
	abort := sampleEvent(Abort)
	abort.Inputs, abort.Outputs, abort.Env = nil, nil, nil
	for name, ev := range map[string]Event{
		"start": sampleEvent(Start), "complete": sampleEvent(Complete), "fail": fail,
		"abort": abort, "unnamed": unnamed, "running": sampleEvent(Running), "other": sampleEvent(Other),
		"guide": guideExample(),
	} {
		t.Run(name, func(t *testing.T) {
			validateEvent(t, mustMarshal(t, cfg, ev))
		})
	}
}

// The shape check alone passes the same events (it runs in every validateEvent).
func TestEventsHaveTheirShape(t *testing.T) {
	cfg := Config{File: "x"}
	fail := sampleEvent(Fail)
	fail.ErrorMessage, fail.ErrorTrace = "export failed", "Traceback (most recent call last):\n"
	for _, ev := range []Event{sampleEvent(Start), sampleEvent(Complete), fail, sampleEvent(Abort),
		{Type: Start, RunID: "r1", StepKey: "a", Attempt: 1}, guideExample()} {
		validateEvent(t, mustMarshal(t, cfg, ev))
	}
}

func TestSchemaURLsMatchThePublishedSchemas(t *testing.T) {
	p := getChecker(t).published
	for _, u := range []string{RunEventSchemaURL, errorMessageSchemaURL, parentRunSchemaURL, datasetVersionURL,
		inputStatisticsURL, outputStatisticsURL, jobTypeSchemaURL, AttemptFacetSchemaURL} {
		base, frag, _ := strings.Cut(u, "#")
		if !p.ids[base] {
			t.Errorf("%s: no schema in %s (or facets/) has $id %s", u, p.dir, base)
		}
		if !strings.HasPrefix(frag, "/$defs/") {
			t.Errorf("%s: fragment %q is not a $defs pointer", u, frag)
		}
	}
}

// The published check has teeth of its own (not only eventShape's): events the spec's schemas
// refuse fail it, checked without eventShape in front.
func TestPublishedSchemasRejectBrokenEvents(t *testing.T) {
	p := getChecker(t).published
	good := mustMarshal(t, Config{}, sampleEvent(Fail))
	for name, edit := range map[string]func(ev map[string]any){
		"runId not a UUID":  func(ev map[string]any) { ev["run"].(map[string]any)["runId"] = "r-20261129-0001" },
		"no producer":       func(ev map[string]any) { delete(ev, "producer") },
		"unknown eventType": func(ev map[string]any) { ev["eventType"] = "DONE" },
		"errorMessage without programmingLanguage": func(ev map[string]any) {
			delete(ev["run"].(map[string]any)["facets"].(map[string]any)["errorMessage"].(map[string]any), "programmingLanguage")
		},
		"parent facet under another key": func(ev map[string]any) {
			f := ev["run"].(map[string]any)["facets"].(map[string]any)
			f["parentRun"] = f["parent"]
			delete(f, "parent")
		},
	} {
		var ev map[string]any
		if err := json.Unmarshal(good, &ev); err != nil {
			t.Fatal(err)
		}
		if err := p.check(t, good, ev); err != nil {
			t.Fatalf("the good event fails the published check: %v", err)
		}
		edit(ev)
		bad, _ := json.Marshal(ev)
		if err := p.check(t, bad, ev); err == nil {
			t.Errorf("%s: the published schemas accept the broken event", name)
		}
	}
}
