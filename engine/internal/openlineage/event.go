package openlineage

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Schema URLs stamped on events and facets: for the spec's own, the versions the OpenLineage
// Python client 1.54 stamps (testdata/README.md); AttemptFacetSchemaURL is this package's
// facets/1-0-0/DccFlowAttemptRunFacet.json, a file that never changes (a changed facet gets a
// new version folder and URL).
const (
	RunEventSchemaURL      = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
	errorMessageSchemaURL  = "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet"
	parentRunSchemaURL     = "https://openlineage.io/spec/facets/1-2-0/ParentRunFacet.json#/$defs/ParentRunFacet"
	datasetVersionURL      = "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet"
	inputStatisticsURL     = "https://openlineage.io/spec/facets/1-0-0/InputStatisticsInputDatasetFacet.json#/$defs/InputStatisticsInputDatasetFacet"
	outputStatisticsURL    = "https://openlineage.io/spec/facets/1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet"
	jobTypeSchemaURL       = "https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet"
	AttemptFacetSchemaURL  = "https://raw.githubusercontent.com/dcc-flow/dcc-flow/main/engine/internal/openlineage/facets/1-0-0/DccFlowAttemptRunFacet.json#/$defs/DccFlowAttemptRunFacet"
	localFileNamespace     = "file"
	remoteFileNamespacePre = "file://"
)

// namespaceUUID is the UUIDv5 namespace of the run ids this package derives (a fixed random
// UUID: changing it would give every attempt a new OpenLineage identity).
var namespaceUUID = [16]byte{0x6b, 0x1e, 0x5c, 0x2a, 0x93, 0x4f, 0x4d, 0x0e, 0xa1, 0x57, 0x3c, 0x88, 0x0d, 0x92, 0xe4, 0x17}

// AttemptUUID is the OpenLineage runId of one attempt: the UUIDv5 (RFC 9562, SHA-1) of
// "attempt", runID, stepKey and attempt joined by NUL bytes, in namespaceUUID. The same
// attempt always gets the same UUID, in every process.
func AttemptUUID(runID, stepKey string, attempt int) string {
	return uuid5(namespaceUUID, "attempt\x00"+runID+"\x00"+stepKey+"\x00"+strconv.Itoa(attempt))
}

// RunUUID is the OpenLineage runId of a whole dcc-flow run (the parent of its attempts): the
// UUIDv5 of "run" and runID joined by a NUL byte.
func RunUUID(runID string) string {
	return uuid5(namespaceUUID, "run\x00"+runID)
}

// uuid5 is the UUIDv5 of name in namespace ns (RFC 9562, section 5.5).
func uuid5(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // variant RFC 9562
	return formatUUID(u)
}

func formatUUID(u [16]byte) string {
	const hexd = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexd[c>>4], hexd[c&0x0f])
	}
	return string(b)
}

// JobName is the OpenLineage job name of a step: workflow + "." + stepKey, or stepKey alone
// when workflow is "" (an unnamed workflow).
func JobName(workflow, stepKey string) string {
	if workflow == "" {
		return stepKey
	}
	return workflow + "." + stepKey
}

// DatasetName is the OpenLineage dataset namespace and name of a file, per the OpenLineage
// naming conventions (https://openlineage.io/docs/spec/naming, "Local file system" and
// "Remote file system"):
//
//   - a UNC path `\\server\share\dir\a.usd` (or //server/share/dir/a.usd) is on a remote file
//     system: namespace "file://server", name "/share/dir/a.usd";
//   - a Windows drive path `C:\show\a.usd` is local: namespace "file", name "C:/show/a.usd"
//     (forward slashes, as in a file: URI);
//   - any other path is local: namespace "file", name the path as given ("/mnt/show/a.usd").
func DatasetName(path string) (namespace, name string) {
	if isUNC(path) {
		rest := strings.ReplaceAll(path[2:], `\`, "/")
		host, tail, _ := strings.Cut(rest, "/")
		return remoteFileNamespacePre + host, "/" + tail
	}
	if isDrivePath(path) {
		return localFileNamespace, strings.ReplaceAll(path, `\`, "/")
	}
	return localFileNamespace, path
}

func isUNC(p string) bool {
	if len(p) < 3 || (p[0] != '\\' && p[0] != '/') || (p[1] != '\\' && p[1] != '/') {
		return false
	}
	// "//" followed by a host name; "///x" is not UNC, nor is "\\?\C:\x" (a Win32 device path)
	// nor "\\.\pipe".
	c := p[2]
	return c != '\\' && c != '/' && c != '?' && c != '.'
}

func isDrivePath(p string) bool {
	return len(p) >= 2 && p[1] == ':' && (p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z')
}

// The JSON shapes of the event, in the order OpenLineage documents them.
type (
	runEvent struct {
		EventType string          `json:"eventType"`
		EventTime string          `json:"eventTime"`
		Run       runJSON         `json:"run"`
		Job       jobJSON         `json:"job"`
		Inputs    []inputDataset  `json:"inputs"`
		Outputs   []outputDataset `json:"outputs"`
		Producer  string          `json:"producer"`
		SchemaURL string          `json:"schemaURL"`
	}
	runJSON struct {
		RunID  string    `json:"runId"`
		Facets runFacets `json:"facets"`
	}
	runFacets struct {
		Parent       *parentFacet       `json:"parent,omitempty"`
		ErrorMessage *errorMessageFacet `json:"errorMessage,omitempty"`
		Attempt      *attemptFacet      `json:"dccFlow_attempt,omitempty"`
	}
	baseFacet struct {
		Producer  string `json:"_producer"`
		SchemaURL string `json:"_schemaURL"`
	}
	parentFacet struct {
		baseFacet
		Run struct {
			RunID string `json:"runId"`
		} `json:"run"`
		Job jobRef `json:"job"`
	}
	jobRef struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	}
	errorMessageFacet struct {
		baseFacet
		Message             string `json:"message"`
		ProgrammingLanguage string `json:"programmingLanguage"`
		StackTrace          string `json:"stackTrace,omitempty"`
	}
	attemptFacet struct {
		baseFacet
		RunID          string          `json:"runId"`
		StepKey        string          `json:"stepKey"`
		Attempt        int             `json:"attempt"`
		Workflow       string          `json:"workflow,omitempty"`
		Tool           string          `json:"tool,omitempty"`
		ParentRunID    string          `json:"parentRunId,omitempty"`
		Environment    json.RawMessage `json:"environment,omitempty"`
		InputsOmitted  int             `json:"inputsOmitted,omitempty"`
		OutputsOmitted int             `json:"outputsOmitted,omitempty"`
	}
	jobJSON struct {
		Namespace string    `json:"namespace"`
		Name      string    `json:"name"`
		Facets    jobFacets `json:"facets"`
	}
	jobFacets struct {
		JobType *jobTypeFacet `json:"jobType,omitempty"`
	}
	jobTypeFacet struct {
		baseFacet
		ProcessingType string `json:"processingType"`
		Integration    string `json:"integration"`
		JobType        string `json:"jobType"`
	}
	datasetFacets struct {
		Version *versionFacet `json:"version,omitempty"`
	}
	versionFacet struct {
		baseFacet
		DatasetVersion string `json:"datasetVersion"`
	}
	statisticsFacet struct {
		baseFacet
		Size      int64 `json:"size"`
		FileCount int   `json:"fileCount"`
	}
	inputDataset struct {
		Namespace   string        `json:"namespace"`
		Name        string        `json:"name"`
		Facets      datasetFacets `json:"facets"`
		InputFacets struct {
			Statistics *statisticsFacet `json:"inputStatistics,omitempty"`
		} `json:"inputFacets"`
	}
	outputDataset struct {
		Namespace    string        `json:"namespace"`
		Name         string        `json:"name"`
		Facets       datasetFacets `json:"facets"`
		OutputFacets struct {
			Statistics *statisticsFacet `json:"outputStatistics,omitempty"`
		} `json:"outputFacets"`
	}
)

var eventTypes = map[string]bool{Start: true, Running: true, Complete: true, Abort: true, Fail: true, Other: true}

// Marshal encodes ev as one OpenLineage RunEvent (a single line of JSON, no newline) for the
// config c (its zero fields take their defaults). It fails on an event that names no attempt
// (empty RunID or StepKey, negative Attempt) or has an unknown Type. A part that cannot be
// encoded (an Env value that is not JSON, or one over MaxEnvBytes) is left out and said in
// warning, a non-nil error beside a usable event.
func Marshal(c Config, ev Event) (data []byte, warning error, err error) {
	c = c.withDefaults()
	if !eventTypes[ev.Type] {
		return nil, nil, fmt.Errorf("openlineage: event type %q of step %q: use START, COMPLETE or FAIL (or RUNNING, ABORT, OTHER)", ev.Type, ev.StepKey)
	}
	if ev.RunID == "" || ev.StepKey == "" {
		return nil, nil, fmt.Errorf("openlineage: %s event names no attempt (run id %q, step key %q): both must be set", ev.Type, ev.RunID, ev.StepKey)
	}
	if ev.Attempt < 0 {
		return nil, nil, fmt.Errorf("openlineage: %s event of step %q has attempt %d: attempts count from 1", ev.Type, ev.StepKey, ev.Attempt)
	}
	t := ev.Time
	if t.IsZero() {
		t = time.Now()
	}
	base := func(schemaURL string) baseFacet { return baseFacet{Producer: c.Producer, SchemaURL: schemaURL} }

	out := runEvent{
		EventType: ev.Type,
		EventTime: t.UTC().Format(time.RFC3339Nano),
		Producer:  c.Producer,
		SchemaURL: RunEventSchemaURL,
		Run:       runJSON{RunID: AttemptUUID(ev.RunID, ev.StepKey, ev.Attempt)},
		Job: jobJSON{
			Namespace: c.Namespace,
			Name:      JobName(ev.Workflow, ev.StepKey),
			Facets: jobFacets{JobType: &jobTypeFacet{
				baseFacet: base(jobTypeSchemaURL), ProcessingType: "BATCH", Integration: "DCC_FLOW", JobType: "TASK",
			}},
		},
	}

	parent := &parentFacet{baseFacet: base(parentRunSchemaURL), Job: jobRef{Namespace: c.Namespace, Name: parentJobName(ev.Workflow)}}
	parent.Run.RunID = RunUUID(ev.RunID)
	out.Run.Facets.Parent = parent

	if ev.Type == Fail || ev.Type == Abort {
		msg := ev.ErrorMessage
		if msg == "" {
			msg = "attempt failed"
			if ev.Type == Abort {
				msg = "attempt aborted"
			}
		}
		out.Run.Facets.ErrorMessage = &errorMessageFacet{
			baseFacet:           base(errorMessageSchemaURL),
			Message:             truncate(msg, MaxErrorBytes),
			ProgrammingLanguage: programmingLanguage(ev.ErrorTrace),
			StackTrace:          truncate(ev.ErrorTrace, MaxErrorBytes),
		}
	}

	att := &attemptFacet{
		baseFacet: base(AttemptFacetSchemaURL),
		RunID:     ev.RunID, StepKey: ev.StepKey, Attempt: ev.Attempt,
		Workflow: ev.Workflow, Tool: ev.Tool, ParentRunID: ev.ParentRunID,
	}
	if ev.Env != nil {
		env, err := json.Marshal(ev.Env)
		switch {
		case err != nil:
			warning = fmt.Errorf("openlineage: the environment of step %q attempt %d does not encode as JSON (%v): sent without it", ev.StepKey, ev.Attempt, err)
		case len(env) > MaxEnvBytes:
			warning = fmt.Errorf("openlineage: the environment of step %q attempt %d is %d bytes encoded, over %d: sent without it", ev.StepKey, ev.Attempt, len(env), MaxEnvBytes)
		default:
			att.Environment = env
		}
	}
	out.Run.Facets.Attempt = att

	out.Inputs = make([]inputDataset, 0, min(len(ev.Inputs), MaxDatasets))
	for _, d := range dedupe(ev.Inputs, &att.InputsOmitted) {
		in := inputDataset{Facets: datasetFacetsOf(d, base)}
		in.Namespace, in.Name = DatasetName(d.Path)
		if d.Hash != "" || d.Size > 0 {
			in.InputFacets.Statistics = &statisticsFacet{baseFacet: base(inputStatisticsURL), Size: max(d.Size, 0), FileCount: 1}
		}
		out.Inputs = append(out.Inputs, in)
	}
	out.Outputs = make([]outputDataset, 0, min(len(ev.Outputs), MaxDatasets))
	for _, d := range dedupe(ev.Outputs, &att.OutputsOmitted) {
		o := outputDataset{Facets: datasetFacetsOf(d, base)}
		o.Namespace, o.Name = DatasetName(d.Path)
		if d.Hash != "" || d.Size > 0 {
			o.OutputFacets.Statistics = &statisticsFacet{baseFacet: base(outputStatisticsURL), Size: max(d.Size, 0), FileCount: 1}
		}
		out.Outputs = append(out.Outputs, o)
	}

	data, err = json.Marshal(out)
	if err != nil { // not reachable: every field is a string, a number or checked JSON
		return nil, nil, fmt.Errorf("openlineage: encoding the %s event of step %q: %w", ev.Type, ev.StepKey, err)
	}
	return data, warning, nil
}

// parentJobName is the job name of a whole run: its workflow, or "run" for an unnamed one.
func parentJobName(workflow string) string {
	if workflow == "" {
		return "run"
	}
	return workflow
}

func datasetFacetsOf(d Dataset, base func(string) baseFacet) datasetFacets {
	if d.Hash == "" {
		return datasetFacets{}
	}
	return datasetFacets{Version: &versionFacet{baseFacet: base(datasetVersionURL), DatasetVersion: d.Hash}}
}

// dedupe returns ds without empty paths and repeats (by dataset namespace and name, the
// first kept), at most MaxDatasets of them; *omitted is set to how many distinct ones were
// left out past the limit.
func dedupe(ds []Dataset, omitted *int) []Dataset {
	seen := make(map[string]bool, min(len(ds), MaxDatasets))
	out := make([]Dataset, 0, min(len(ds), MaxDatasets))
	for _, d := range ds {
		if d.Path == "" {
			continue
		}
		ns, name := DatasetName(d.Path)
		k := ns + "\x00" + name
		if seen[k] {
			continue
		}
		seen[k] = true
		if len(out) == MaxDatasets {
			*omitted++
			continue
		}
		out = append(out, d)
	}
	return out
}

// programmingLanguage is the errorMessage facet's programmingLanguage: "python" when the trace
// is a Python traceback (the tools of dcc-flow are Python), else "unknown".
func programmingLanguage(trace string) string {
	if strings.Contains(trace, "Traceback (most recent call last)") || strings.Contains(trace, ".py\", line ") {
		return "python"
	}
	return "unknown"
}

// truncate cuts s to at most n bytes (plus a marker), at a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… [%d bytes cut]", len(s)-cut)
}
