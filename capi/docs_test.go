//go:build dccflow_cabitest

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// TestDocsExamples keeps docs/reference/c-abi/ (its README.md and parts, one page) exact, as engine/spec/docs_test.go does for docs/reference/spec.md.
// Every ```json block of it after an annotation (an HTML comment on the line before the fence) is
// sent to the real exports, through C strings as a C host sends it, or checked against their
// answers, in the order of the page:
//
//	<!-- request: NAME -->                 the block is sent to export NAME and must succeed
//	<!-- request: NAME; fails: CODE -->    the block is sent to NAME and must fail with code CODE
//	<!-- response: NAME[, NAME…]; optional: PATH[, PATH…] -->
//	                                       the block has the shape of the last answer of each NAME
//	<!-- error: NAME -->                   the block has the shape of the last error envelope of NAME
//	<!-- envelope -->                      every error envelope met has the shape of the block
//
// Same shape means the same keys with the same JSON types, recursively; each element of an answer's
// array is compared with the first element of the example's (an empty example array shows no
// element to compare). A key of the answer that the example lacks is an undocumented field; a key
// of the example that the answer lacks must be listed optional ("error", "steps[].output";
// "events[]" lets the answer's array be empty). A null in the example stands for any value. The
// values of keys that hold user data (args, inputs, output, outputs, spec, schema, detail, details
// under an envelope, headers, env) are only checked for presence.
//
// Requests name the example's ids (run_id, call_id, call_ids, puller): an id met in an earlier
// response example is replaced by the live value it was compared with. Exports that take no engine
// get handle 0; the others the engine of the last engine_open example. Every export of
// capi/dccflow.h has at least one request and one response example.
func TestDocsExamples(t *testing.T) {
	page, at := readABIDoc(t)
	const docsPath = abiDocDir
	blocks := abiDocBlocks(t, at, page)
	d := &docRun{t: t, ids: map[string]any{}, last: map[string]map[string]any{}, lastErr: map[string]map[string]any{}}
	t.Cleanup(func() {
		if d.handle != 0 {
			callExport("dccflow_engine_close", d.handle, nil, false)
		}
	})
	requested, answered := map[string]bool{}, map[string]bool{}
	var envelopes []docBlock
	for _, blk := range blocks {
		where := at(blk.line)
		var doc any
		if err := json.Unmarshal([]byte(blk.text), &doc); err != nil {
			t.Errorf("%s: the example is not JSON: %v", where, err)
			continue
		}
		switch blk.kind {
		case "request":
			requested[blk.names[0]] = true
			d.send(where, blk.names[0], doc, blk.fails)
		case "response", "error":
			for _, name := range blk.names {
				answered[name] = answered[name] || blk.kind == "response"
				real := d.last[name]
				if blk.kind == "error" {
					real = d.lastErr[name]
				}
				if real == nil {
					t.Errorf("%s: no %s of %s to compare with: put a request example of it before", where, blk.kind, name)
					continue
				}
				d.compare(where, name, blk.optional, doc, real)
			}
		case "envelope":
			envelopes = append(envelopes, blk)
		}
	}
	if len(envelopes) != 1 {
		t.Errorf("%s: want one <!-- envelope --> example, found %d", docsPath, len(envelopes))
	} else {
		var doc any
		_ = json.Unmarshal([]byte(envelopes[0].text), &doc)
		if len(d.envelopes) == 0 {
			t.Errorf("%s: no request example failed, so the envelope example was compared with nothing", docsPath)
		}
		for _, env := range d.envelopes {
			d.compare(at(envelopes[0].line), env.name, envelopes[0].optional, doc, env.real)
		}
	}
	names := make([]string, 0, len(exportsByName))
	for name := range exportsByName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !requested[name] {
			t.Errorf("%s has no request example of %s", docsPath, name)
		}
		if !answered[name] {
			t.Errorf("%s has no response example of %s", docsPath, name)
		}
	}
}

// abiDocDir is the C ABI's page: its index (README.md) and the parts the index lists.
const abiDocDir = "../docs/reference/c-abi/"

var abiPartRe = regexp.MustCompile(`(?m)^\d+\. \[[^\]]+\]\(([\w-]+\.md)\)`)

// readABIDoc returns the page (the index, then its parts in the order of its numbered list of
// parts, as one text) and a function naming the file and its own line of a 1-based page line.
func readABIDoc(t *testing.T) (string, func(line int) string) {
	t.Helper()
	index, err := os.ReadFile(abiDocDir + "README.md")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, m := range abiPartRe.FindAllStringSubmatch(string(index), -1) {
		files = append(files, m[1])
	}
	if len(files) == 1 {
		t.Fatalf("%sREADME.md lists no parts", abiDocDir)
	}
	var page strings.Builder
	var firstLines []int // the page line of each file's first line
	line := 1
	for _, f := range files {
		b, err := os.ReadFile(abiDocDir + f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(b), "\n") {
			t.Fatalf("%s%s does not end with a newline", abiDocDir, f)
		}
		firstLines = append(firstLines, line)
		line += strings.Count(string(b), "\n")
		page.Write(b)
	}
	at := func(line int) string {
		i := sort.Search(len(firstLines), func(i int) bool { return firstLines[i] > line }) - 1
		return fmt.Sprintf("%s%s:%d", abiDocDir, files[i], line-firstLines[i]+1)
	}
	return page.String(), at
}

// docBlock is an annotated ```json block of docs/reference/c-abi/.
type docBlock struct {
	kind     string // request, response, error, envelope
	names    []string
	fails    string          // the code a request must fail with; "" = must succeed
	optional map[string]bool // paths a response may lack
	text     string
	line     int
}

var abiNoteRe = regexp.MustCompile(`^<!--\s*(request|response|error|envelope)\s*(?::\s*(.*?))?\s*-->$`)

func abiDocBlocks(t *testing.T, at func(line int) string, text string) []docBlock {
	t.Helper()
	lines := strings.Split(text, "\n")
	var out []docBlock
	prev := ""
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(trimmed, "```") {
			if trimmed != "" {
				prev = trimmed
			}
			continue
		}
		lang, note, start := strings.TrimLeft(trimmed, "`"), prev, i+1
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		prev = "```"
		if lang != "json" {
			continue
		}
		if !strings.HasPrefix(note, "<!--") {
			t.Errorf("%s: a json example without an annotation (<!-- request: NAME -->, <!-- response: NAME -->, …); a schematic is a text block", at(start))
			continue
		}
		m := abiNoteRe.FindStringSubmatch(note)
		if m == nil {
			t.Errorf("%s: malformed annotation %q", at(start), note)
			continue
		}
		blk := docBlock{kind: m[1], text: strings.Join(body, "\n"), line: start, optional: map[string]bool{}}
		for j, part := range strings.Split(m[2], ";") {
			part = strings.TrimSpace(part)
			switch {
			case part == "":
			case j == 0 && !strings.Contains(part, ":"):
				for _, n := range strings.Split(part, ",") {
					n = strings.TrimSpace(n)
					if _, ok := exportsByName[n]; !ok {
						t.Errorf("%s: %q is not an export", at(start), n)
					}
					blk.names = append(blk.names, n)
				}
			case strings.HasPrefix(part, "fails:"):
				blk.fails = strings.TrimSpace(strings.TrimPrefix(part, "fails:"))
			case strings.HasPrefix(part, "optional:"):
				for _, p := range strings.Split(strings.TrimPrefix(part, "optional:"), ",") {
					blk.optional[strings.TrimSpace(p)] = true
				}
			default:
				t.Errorf("%s: unknown annotation part %q", at(start), part)
			}
		}
		if (blk.kind == "envelope") != (len(blk.names) == 0) || (blk.kind == "request" && len(blk.names) != 1) {
			t.Errorf("%s: annotation %q names the wrong number of exports", at(start), note)
			continue
		}
		out = append(out, blk)
	}
	return out
}

// docRun is the state of the walk through the page's examples.
type docRun struct {
	t         *testing.T
	handle    uint64                    // the engine of the last engine_open example
	ids       map[string]any            // an example's id (as JSON) → the live value
	last      map[string]map[string]any // export → its last answer
	lastErr   map[string]map[string]any // export → its last error envelope
	envelopes []struct {
		name string
		real map[string]any
	}
}

// noEngine are the exports that take handle 0.
var noEngine = map[string]bool{"dccflow_version": true, "dccflow_spec_parse": true, "dccflow_spec_validate": true,
	"dccflow_schedules_parse": true, "dccflow_schedules_validate": true, "dccflow_engine_open": true}

// idKeys hold ids that requests name and answers give.
var idKeys = map[string]bool{"run_id": true, "call_id": true, "puller": true, "handle": true}

// freeKeys hold user data, whose shape the contract does not fix.
var freeKeys = map[string]bool{"args": true, "inputs": true, "output": true, "outputs": true, "spec": true,
	"schema": true, "detail": true, "headers": true, "env": true, "stack": true}

func (d *docRun) send(where, name string, doc any, fails string) {
	t := d.t
	req := d.liveIDs("", doc)
	m, _ := req.(map[string]any)
	switch name {
	case "dccflow_run_approve":
		d.waitStatus(where, m["run_id"], "waiting")
	case "dccflow_serve_start":
		if _, ok := m["schedules_dir"]; ok {
			m["schedules_dir"] = t.TempDir()
		}
	}
	in, _ := json.Marshal(req)
	s := string(in)
	h := d.handle
	if noEngine[name] {
		h = 0
	}
	rc, out := callExport(name, h, &s, false)
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Errorf("%s: %s answered %q, not a JSON object: %v", where, name, out, err)
		return
	}
	if rc != rcOK {
		d.lastErr[name] = res
		d.envelopes = append(d.envelopes, struct {
			name string
			real map[string]any
		}{name, res})
		if fails == "" {
			t.Errorf("%s: %s failed (return value %d): %s\nrequest: %s", where, name, rc, out, s)
		} else if res["code"] != fails {
			t.Errorf("%s: %s failed with code %v, the example says %s: %s", where, name, res["code"], fails, out)
		}
		return
	}
	if fails != "" {
		t.Errorf("%s: %s succeeded, the example says it fails with %s: %s", where, name, fails, out)
	}
	d.last[name] = res
	if os.Getenv("DCCFLOW_DOCS_LOG") != "" {
		t.Logf("%s: %s %s → %s", where, name, s, out)
	}
	if name == "dccflow_engine_open" {
		d.handle = uint64(res["handle"].(float64))
	}
}

// liveIDs returns v with the example's ids replaced by the live ones.
func (d *docRun) liveIDs(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = d.liveIDs(k, x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		elemKey := key
		if key == "call_ids" {
			elemKey = "call_id"
		}
		for i, x := range v {
			out[i] = d.liveIDs(elemKey, x)
		}
		return out
	}
	if idKeys[key] {
		if live, ok := d.ids[idKey(key, v)]; ok {
			return live
		}
	}
	return v
}

func idKey(key string, v any) string {
	b, _ := json.Marshal(v)
	return key + "=" + string(b)
}

// waitStatus polls run_status until the run has status (an approval is filed once its step runs).
func (d *docRun) waitStatus(where string, runID any, status string) {
	in, _ := json.Marshal(map[string]any{"run_id": runID})
	s := string(in)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, out := callExport("dccflow_run_status", d.handle, &s, false)
		if strings.Contains(out, `"status":"`+status+`"`) {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: run %v never reached %s: %s", where, runID, status, out)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (d *docRun) compare(where, name string, optional map[string]bool, doc any, real map[string]any) {
	var problems []string
	d.shape("", doc, real, optional, true, &problems)
	for _, p := range problems {
		d.t.Errorf("%s: the example of %s differs from its answer: %s", where, name, p)
	}
	if len(problems) > 0 {
		b, _ := json.Marshal(real)
		d.t.Logf("%s: the answer of %s was %s", where, name, b)
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// shape compares the example doc with the answer real at path, and learns the answer's ids.
func (d *docRun) shape(path string, doc, real any, optional map[string]bool, learn bool, problems *[]string) {
	key := path[strings.LastIndex(path, ".")+1:]
	if doc == nil || freeKeys[strings.TrimSuffix(key, "[]")] {
		return
	}
	if jsonKind(doc) != jsonKind(real) {
		*problems = append(*problems, fmt.Sprintf("%s is %s in the example, %s in the answer", show(path), jsonKind(doc), jsonKind(real)))
		return
	}
	switch doc := doc.(type) {
	case map[string]any:
		real := real.(map[string]any)
		keys := make([]string, 0, len(doc)+len(real))
		for k := range doc {
			keys = append(keys, k)
		}
		for k := range real {
			if _, ok := doc[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			dv, inDoc := doc[k]
			rv, inReal := real[k]
			switch {
			case !inDoc:
				*problems = append(*problems, fmt.Sprintf("the answer has %s, which the example does not show", show(p)))
			case !inReal:
				if !optional[p] {
					*problems = append(*problems, fmt.Sprintf("the example shows %s, which the answer lacks (list it optional if it is)", show(p)))
				}
			default:
				if idKeys[k] && learn {
					d.ids[idKey(k, dv)] = rv
				}
				d.shape(p, dv, rv, optional, learn, problems)
			}
		}
	case []any:
		real := real.([]any)
		if len(doc) == 0 {
			return
		}
		if len(real) == 0 {
			if !optional[path+"[]"] {
				*problems = append(*problems, fmt.Sprintf("the example shows elements of %s, the answer has none", show(path)))
			}
			return
		}
		for i, rv := range real {
			d.shape(path+"[]", doc[0], rv, optional, learn && i == 0, problems) // ids: of the first element
		}
	}
}

func show(path string) string {
	if path == "" {
		return "the top level"
	}
	return fmt.Sprintf("%q", path)
}

// requestTypes are the Go types each export decodes its request into (nil: it reads none).
var requestTypes = map[string]any{
	"dccflow_version":             nil,
	"dccflow_spec_parse":          specRequest{},
	"dccflow_spec_validate":       specRequest{},
	"dccflow_engine_open":         openRequest{},
	"dccflow_workflows_list":      workflowsRequest{},
	"dccflow_engine_close":        nil,
	"dccflow_tool_register":       toolRequest{},
	"dccflow_workflow_register":   specRequest{},
	"dccflow_run_submit":          submitRequest{},
	"dccflow_run_dry":             dryRequest{},
	"dccflow_run_status":          runRequest{},
	"dccflow_run_wait":            runRequest{},
	"dccflow_run_cancel":          cancelRequest{},
	"dccflow_run_approve":         approveRequest{},
	"dccflow_run_pause":           pauseRequest{},
	"dccflow_run_unpause":         pauseRequest{},
	"dccflow_run_resume":          resumeRequest{},
	"dccflow_runs_list":           runsRequest{},
	"dccflow_pools_list":          poolsRequest{},
	"dccflow_runs_prune":          pruneRequest{},
	"dccflow_calls_next":          nextRequest{},
	"dccflow_calls_complete":      completeRequest{},
	"dccflow_calls_complete_many": completeManyRequest{},
	"dccflow_call_cancelled":      cancelledRequest{},
	"dccflow_call_report":         reportRequest{},
	"dccflow_puller_open":         pullerOpenRequest{},
	"dccflow_puller_close":        pullerRequest{},
	"dccflow_calls_release":       releaseRequest{},
	"dccflow_events_next":         eventsRequest{},
	"dccflow_schedules_parse":     schedulesParseRequest{},
	"dccflow_schedules_validate":  schedulesValidateRequest{},
	"dccflow_schedule_add":        flowtype.ScheduleSpec{},
	"dccflow_schedule_remove":     idRequest{},
	"dccflow_schedules_list":      nil,
	"dccflow_serve_start":         serveRequest{},
	"dccflow_serve_stop":          nil,
	"dccflow_serve_status":        serveStatusRequest{},
	"dccflow_idempotency_purge":   nil,
	"dccflow_retention_status":    nil,
	"dccflow_schedule_fires":      scheduleFiresRequest{},
	"dccflow_file_lineage":        lineageRequest{},
	"dccflow_files_stale":         staleRequest{},
	"dccflow_cache_list":          engine.CacheFilter{},
	"dccflow_cache_purge":         engine.CacheFilter{},
	"dccflow_resources":           resourcesRequest{},
}

// TestDocsRequestFields: every field an export's request accepts is named (`field`) in the
// section of docs/reference/c-abi/ that documents the export, and every field of a nested object (a
// config's remote, a schedule's trigger) somewhere in the page. Response fields are checked by
// TestDocsExamples (an answer's field missing from its example fails there).
func TestDocsRequestFields(t *testing.T) {
	t.Parallel()
	page, _ := readABIDoc(t)
	const docsPath = abiDocDir
	for name := range exportsByName {
		typ, ok := requestTypes[name]
		if !ok {
			t.Errorf("requestTypes has no entry for %s", name)
			continue
		}
		if typ == nil {
			continue
		}
		section := docSection(page, name)
		if section == "" {
			t.Errorf("%s: no section (### heading) names %s", docsPath, name)
			continue
		}
		for _, f := range jsonFields(reflect.TypeOf(typ), 0) {
			text := section
			if f.depth > 0 {
				text = page
			}
			if !strings.Contains(text, "`"+f.name+"`") && !strings.Contains(text, `"`+f.name+`"`) {
				where := "the section of " + name
				if f.depth > 0 {
					where = "the page"
				}
				t.Errorf("%s: %s does not name the request field %q (Go %s)", docsPath, where, f.name, f.goPath)
			}
		}
	}
	for name := range requestTypes {
		if _, ok := exportsByName[name]; !ok {
			t.Errorf("requestTypes names %s, which is not an export", name)
		}
	}
}

// docSection is the text under the ### heading that names export (up to the next heading).
func docSection(page, export string) string {
	lines := strings.Split(page, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "### ") || !strings.Contains(l, "`"+export+"(") {
			continue
		}
		var out []string
		for _, l := range lines[i+1:] {
			if strings.HasPrefix(l, "# ") || strings.HasPrefix(l, "## ") || strings.HasPrefix(l, "### ") {
				break
			}
			out = append(out, l)
		}
		return strings.Join(out, "\n")
	}
	return ""
}

type jsonField struct {
	name   string
	goPath string
	depth  int // 0 = a field of the request object itself
}

// jsonFields lists the JSON field names of struct type t (embedded structs flattened, nested
// structs, maps and slices of structs followed).
func jsonFields(t reflect.Type, depth int) []jsonField {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return nil
	}
	var out []jsonField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			out = append(out, jsonFields(f.Type, depth)...)
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, jsonField{name: tag, goPath: t.Name() + "." + f.Name, depth: depth})
		out = append(out, jsonFields(f.Type, depth+1)...)
	}
	return out
}
