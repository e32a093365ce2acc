package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Bounds of the run page's lists: a 10,000-item foreach is summarised, not sent whole.
const (
	maxInstances    = 2000  // step instances listed by GET /api/runs/ID
	maxGanttEvents  = 20000 // events read to build the attempts; beyond, one bar per instance
	eventsPageSize  = 1000
	defaultFireRows = 50
)

func (h *handler) routes() {
	m := h.mux
	m.HandleFunc("GET /{$}", h.index)
	files := http.FileServerFS(h.assets)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/"):
			h.guard(func(w http.ResponseWriter, r *http.Request, _ auth) {
				if allow := h.allowed(r); len(allow) > 0 {
					w.Header().Set("Allow", strings.Join(allow, ", "))
					writeError(w, http.StatusMethodNotAllowed, run.CodeInvalidRequest, fmt.Sprintf(
						"%s %s: this route answers %s only (docs/guide/ui.md)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
					return
				}
				writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API route %s %s (docs/guide/ui.md lists them)", r.Method, r.URL.Path))
			})(w, r)
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, run.CodeInvalidRequest, r.Method+" is not served here")
		default:
			files.ServeHTTP(w, r)
		}
	})
	m.HandleFunc("GET /login", h.loginForm)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("GET /api/session", h.guard(h.sessionInfo))
	m.HandleFunc("POST /api/logout", h.guard(h.logout))
	api := func(pattern string, fn http.HandlerFunc) {
		m.HandleFunc(pattern, h.guard(func(w http.ResponseWriter, r *http.Request, _ auth) { fn(w, r) }))
	}
	api("GET /api/runs", h.listRuns)
	api("POST /api/runs", h.startRun)
	api("GET /api/runs/{id}", h.getRun)
	api("GET /api/runs/{id}/steps/{key}", h.getStep)
	api("POST /api/runs/{id}/approve", h.approve)
	api("POST /api/runs/{id}/cancel", h.cancel)
	api("POST /api/runs/{id}/resume", h.resume)
	api("POST /api/runs/{id}/pause", h.pause(true))
	api("POST /api/runs/{id}/unpause", h.pause(false))
	api("GET /api/events", h.events)
	api("GET /api/workflows", h.listWorkflows)
	api("GET /api/workflows/{name}", h.getWorkflow)
	api("GET /api/lineage", h.lineage)
	api("GET /api/stale", h.stale)
	api("GET /api/schedules", h.listSchedules)
	api("GET /api/schedules/{id}/fires", h.scheduleFires)
	api("POST /api/schedules/{id}/enable", h.setSchedule(true))
	api("POST /api/schedules/{id}/disable", h.setSchedule(false))
	if h.opts.Metrics != nil {
		metrics := h.opts.Metrics
		m.HandleFunc("GET /metrics", h.guard(func(w http.ResponseWriter, r *http.Request, _ auth) { metrics.ServeHTTP(w, r) }))
	}
}

// allowed returns the methods an API route answers at r's path when r's method is not one of
// them (GET, HEAD and POST are the API's only ones); nil when no route has the path.
func (h *handler) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
			if m == http.MethodGet {
				out = append(out, http.MethodHead)
			}
		}
	}
	return out
}

// index serves the page and gives the browser its CSRF cookie.
func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	h.ensureCSRF(w, r)
	b, err := fs.ReadFile(h.assets, "index.html")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// RunSummary is a run as the runs table shows it (GET /api/runs, the SSE "run" event).
type RunSummary struct {
	ID          string        `json:"id"`
	Name        string        `json:"name"`
	Status      run.Status    `json:"status"`
	Terminal    bool          `json:"terminal"`
	Progress    run.Progress  `json:"progress"`
	CreatedAt   time.Time     `json:"created_at"`
	UpdatedAt   time.Time     `json:"updated_at"`
	FinishedAt  *time.Time    `json:"finished_at"`
	ParentRunID string        `json:"parent_run_id"`
	Origin      string        `json:"origin"`
	Error       *SummaryError `json:"error"`
	Approvals   int           `json:"approvals"` // open approvals
}

// SummaryError is why a run did not complete, in a RunSummary.
type SummaryError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func summaryOf(info *engine.RunInfo) RunSummary {
	s := RunSummary{ID: info.ID, Name: info.Name, Status: info.Status, Terminal: info.Terminal, Progress: info.Progress,
		CreatedAt: info.CreatedAt, UpdatedAt: info.UpdatedAt, ParentRunID: info.ParentRunID, Origin: info.Origin,
		Approvals: len(info.Approvals)}
	if !info.FinishedAt.IsZero() {
		t := info.FinishedAt
		s.FinishedAt = &t
	}
	if info.Error != nil {
		s.Error = &SummaryError{Kind: info.Error.Kind, Message: info.Error.Message}
	}
	return s
}

// listRuns answers GET /api/runs?status=&workflow=&since=&until=&input=&tool=&step_status=&error_kind=&worker=&error_text=&limit=&cursor=
// (the search of docs/reference/cli/inspecting.md "runs"; see searchQuery).
func (h *handler) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := engine.RunFilter{Name: q.Get("workflow")}
	for _, s := range strings.Split(q.Get("status"), ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "waiting_approval": // the dashboard's word for a run waiting on an approval
			f.Statuses = append(f.Statuses, run.StatusWaiting)
		default:
			if !run.Status(s).Valid() {
				writeError(w, http.StatusBadRequest, run.CodeInvalidInput, fmt.Sprintf(
					"status %q is not a run status; use pending, running, waiting (or waiting_approval), paused, completed, failed, cancelled or interrupted", s))
				return
			}
			f.Statuses = append(f.Statuses, run.Status(s))
		}
	}
	if err := searchQuery(q, &f); err != nil {
		writeEngineError(w, err)
		return
	}
	limit := DefaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			writeError(w, http.StatusBadRequest, run.CodeInvalidInput, fmt.Sprintf("limit %q must be a whole number from 1 to %d", s, MaxPageSize))
			return
		}
		limit = n
	}
	if s := q.Get("cursor"); s != "" {
		c, ok := engine.ParseRunCursor(s)
		if !ok {
			writeError(w, http.StatusBadRequest, run.CodeInvalidInput, fmt.Sprintf("cursor %q is not one this server gave (next_cursor of the previous page)", s))
			return
		}
		f.After = &c
	}
	f.Limit = limit + 1 // one more tells whether a next page exists
	infos, err := h.e.Runs(r.Context(), f)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	out := struct {
		Runs       []RunSummary `json:"runs"`
		NextCursor string       `json:"next_cursor"`
	}{Runs: make([]RunSummary, 0, min(len(infos), limit))}
	if len(infos) > limit {
		infos = infos[:limit]
		last := infos[limit-1]
		out.NextCursor = engine.FormatRunCursor(engine.RunCursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	for i := range infos {
		sum := summaryOf(&infos[i])
		if sum.Status == run.StatusWaiting { // Runs lists no approvals: count the open ones
			if info, err := h.e.Status(r.Context(), sum.ID); err == nil {
				sum.Approvals = len(info.Approvals)
			}
		}
		out.Runs = append(out.Runs, sum)
	}
	writeJSON(w, http.StatusOK, out)
}

// Attempt is one attempt of a step instance, a bar of the run page's Gantt.
type Attempt struct {
	StepKey    string                `json:"step_key"`
	StepID     string                `json:"step_id"`
	Attempt    int                   `json:"attempt"`
	Status     string                `json:"status"`
	StartedAt  time.Time             `json:"started_at"`
	FinishedAt *time.Time            `json:"finished_at"`
	Worker     string                `json:"worker,omitempty"`
	Error      *engine.StepErrorInfo `json:"error,omitempty"`
}

// Instance is a step instance in the run page's list (its output and logs come from
// GET /api/runs/ID/steps/KEY).
type Instance struct {
	Key       string         `json:"key"`
	StepID    string         `json:"step_id"`
	Kind      string         `json:"kind"`
	Status    run.StepStatus `json:"status"`
	Attempts  int            `json:"attempts"`
	Cached    bool           `json:"cached,omitempty"`
	Worker    string         `json:"worker,omitempty"`
	ErrorKind string         `json:"error_kind,omitempty"`
	// Waiting is what a waiting_resources instance waits for (engine.StepInfo.Waiting).
	Waiting    *run.StepWaiting `json:"waiting,omitempty"`
	StartedAt  *time.Time       `json:"started_at"`
	FinishedAt *time.Time       `json:"finished_at"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// getRun answers GET /api/runs/ID: the run's RunInfo with its graph, its step instances and the
// attempts of its Gantt.
func (h *handler) getRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx := r.Context()
	info, err := h.e.Status(ctx, id)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	sp, err := h.e.RunSpec(ctx, id)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	steps, err := h.e.Steps(engine.WithoutAttempts(ctx), id) // the instances only: a step's attempts come with it (getStep)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	out := struct {
		*engine.RunInfo
		Graph             Graph      `json:"graph"`
		Instances         []Instance `json:"instances"`
		InstancesTotal    int        `json:"instances_total"`
		Attempts          []Attempt  `json:"attempts"`
		AttemptsTruncated bool       `json:"attempts_truncated,omitempty"`
	}{RunInfo: info, Graph: graphOf(sp), InstancesTotal: len(steps)}
	// ?instances=TEXT lists only the instances whose key contains TEXT or whose status is TEXT:
	// how the page finds one among more than maxInstances.
	listed := steps
	if f := strings.ToLower(r.URL.Query().Get("instances")); f != "" {
		listed = nil
		for _, st := range steps {
			if strings.Contains(strings.ToLower(st.Key), f) || string(st.Status) == f {
				listed = append(listed, st)
			}
		}
	}
	out.Instances = make([]Instance, 0, min(len(listed), maxInstances))
	for i, st := range listed {
		if i == maxInstances {
			break
		}
		in := Instance{Key: st.Key, StepID: st.StepID, Kind: st.Kind, Status: st.Status, Attempts: st.Attempts, Cached: st.Cached,
			Worker: st.Worker, Waiting: st.Waiting, StartedAt: timePtr(st.StartedAt), FinishedAt: timePtr(st.FinishedAt)}
		if st.Error != nil {
			in.ErrorKind = st.Error.Kind
		}
		out.Instances = append(out.Instances, in)
	}
	if len(steps) > maxInstances {
		// The Gantt draws the instances listed, not 10,000 more bars, and reading the events of
		// such a run costs more than the page: one bar per listed instance, its last attempt.
		out.Attempts, out.AttemptsTruncated = lastAttempts(listed[:min(len(listed), maxInstances)]), true
	} else {
		out.Attempts, out.AttemptsTruncated = h.attempts(ctx, id, steps)
	}
	writeJSON(w, http.StatusOK, out)
}

// attempts builds the Gantt bars of a run from its step events (one bar per attempt, retries
// included); when the run has more than maxGanttEvents events, from its step instances (one
// bar per instance, its last attempt), and truncated is true.
func (h *handler) attempts(ctx context.Context, runID string, steps []engine.StepInfo) (out []Attempt, truncated bool) {
	stepID := make(map[string]engine.StepInfo, len(steps))
	for _, st := range steps {
		stepID[st.Key] = st
	}
	out = []Attempt{}
	open := map[string]int{} // key#attempt → index in out
	keyOf := func(k string, n int) string { return k + "#" + strconv.Itoa(n) }
	seen, from := 0, uint64(1)
	for {
		evs, err := h.e.PollEvents(ctx, engine.EventQuery{RunID: runID, FromSeq: from, Max: eventsPageSize}, 0)
		if err != nil || len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			from = ev.Seq + 1
			if ev.StepKey == "" {
				continue
			}
			switch ev.Type {
			case run.EventStepEnter, run.EventStepRetry, run.EventStepExit:
			case run.EventStepProgress: // a wait for resources starts (waiting_resources) or ends (running)
				if i, ok := open[keyOf(ev.StepKey, ev.Attempt)]; ok && out[i].FinishedAt == nil &&
					(ev.Status == string(run.StepWaitingResources) || ev.Status == string(run.StepRunning)) {
					out[i].Status = ev.Status
				}
				continue
			default:
				continue
			}
			// step_enter opens attempt n; step_retry (attempt = the next one, n+1) closes
			// attempt n as failed and opens n+1 after its delay; step_exit closes attempt n.
			get := func(n int, at time.Time) *Attempt {
				k := keyOf(ev.StepKey, n)
				i, ok := open[k]
				if !ok {
					out = append(out, Attempt{StepKey: ev.StepKey, StepID: stepID[ev.StepKey].StepID, Attempt: n, Status: string(run.StepRunning), StartedAt: at})
					i = len(out) - 1
					open[k] = i
				}
				return &out[i]
			}
			var d struct {
				Error   *engine.StepErrorInfo `json:"error"`
				DelayMS int64                 `json:"delay_ms"`
			}
			_ = json.Unmarshal(ev.Detail, &d)
			t := ev.Time
			switch ev.Type {
			case run.EventStepEnter:
				a := get(ev.Attempt, t)
				a.StartedAt, a.Status, a.FinishedAt = t, ev.Status, nil
			case run.EventStepRetry:
				failed := get(ev.Attempt-1, t)
				failed.Status, failed.FinishedAt, failed.Error = string(run.StepFailed), &t, d.Error
				get(ev.Attempt, t.Add(time.Duration(d.DelayMS)*time.Millisecond))
			case run.EventStepExit:
				a := get(ev.Attempt, t)
				a.Status, a.FinishedAt, a.Error = ev.Status, &t, d.Error
			}
		}
		if seen += len(evs); seen >= maxGanttEvents {
			truncated = true
			break
		}
	}
	if !truncated {
		for i := range out {
			if st, ok := stepID[out[i].StepKey]; ok && st.Attempts == out[i].Attempt {
				out[i].Worker = st.Worker
			}
		}
		return out, false
	}
	return lastAttempts(steps), true
}

// lastAttempts is one Gantt bar per step instance that started: its last attempt.
func lastAttempts(steps []engine.StepInfo) []Attempt {
	out := []Attempt{}
	for _, st := range steps {
		if st.StartedAt.IsZero() {
			continue
		}
		out = append(out, Attempt{StepKey: st.Key, StepID: st.StepID, Attempt: st.Attempts, Status: string(st.Status),
			StartedAt: st.StartedAt, FinishedAt: timePtr(st.FinishedAt), Worker: st.Worker, Error: st.Error})
	}
	return out
}

// getStep answers GET /api/runs/ID/steps/KEY: one step instance in full.
func (h *handler) getStep(w http.ResponseWriter, r *http.Request) {
	id, key := r.PathValue("id"), r.PathValue("key")
	steps, err := h.e.Steps(r.Context(), id)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	for _, st := range steps {
		if st.Key != key {
			continue
		}
		out := struct {
			engine.StepInfo
			// DeclaredArgs are the step's arguments as its spec declares them (templates not
			// rendered; StepInfo.Args and AttemptHistory have the rendered ones), secrets
			// redacted by name as there (engine.RedactArgs), Tool its tool.
			DeclaredArgs map[string]any `json:"declared_args,omitempty"`
			Tool         string         `json:"tool,omitempty"`
		}{StepInfo: st}
		if sp, err := h.e.RunSpec(r.Context(), id); err == nil {
			if decl := sp.Find(st.StepID); decl != nil {
				out.Tool, out.DeclaredArgs = decl.Tool, engine.RedactArgs(decl.Args)
				if decl.Kind == "workflow" {
					out.Tool, out.DeclaredArgs = decl.Workflow, engine.RedactArgs(decl.Inputs)
				}
			}
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	writeError(w, http.StatusNotFound, run.CodeNotFound, fmt.Sprintf("run %s has no step instance %q", id, key))
}

// actionBody is the JSON body of the POST actions.
type actionBody struct {
	By       string   `json:"by"`
	Reason   string   `json:"reason"`
	Step     string   `json:"step"`
	Approved *bool    `json:"approved"`
	Comment  string   `json:"comment"`
	Force    []string `json:"force"`
}

// readAction decodes an action's body and checks `by`; it answers the request and returns
// false on a failure.
func readAction(w http.ResponseWriter, r *http.Request) (actionBody, bool) {
	var b actionBody
	if !readBody(w, r, &b) {
		return b, false
	}
	by, ok := checkBy(w, b.By)
	b.By = by
	return b, ok
}

// readBody decodes a POST's JSON body into v (unknown fields refused; an empty body leaves v
// zero); it answers the request and returns false on a failure: 413 too_large over
// maxBodyBytes, 400 invalid_input for anything that is not such an object.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, run.CodeTooLarge, fmt.Sprintf(
				"the body is larger than %d bytes: an action's body is a small JSON object of its fields (docs/guide/ui.md)", maxBodyBytes))
			return false
		}
		writeError(w, http.StatusBadRequest, run.CodeInvalidInput, "the body must be a JSON object of the action's fields (docs/guide/ui.md): "+err.Error())
		return false
	}
	return true
}

// checkBy trims by and checks it is there and at most 200 bytes; it answers the request and
// returns false when not.
func checkBy(w http.ResponseWriter, by string) (string, bool) {
	by = strings.TrimSpace(by)
	if by == "" {
		writeError(w, http.StatusBadRequest, run.CodeInvalidInput, "by is empty: every action is recorded with who did it; type your name in the dashboard's header")
		return by, false
	}
	if len(by) > 200 {
		writeError(w, http.StatusBadRequest, run.CodeInvalidInput, "by is longer than 200 bytes")
		return by, false
	}
	return by, true
}

// startBody is the JSON body of POST /api/runs.
type startBody struct {
	Workflow string      `json:"workflow"`
	Inputs   spec.Object `json:"inputs"` // decoded so that integers beyond 2^53 stay exact
	By       string      `json:"by"`
	// SpecHash, when not "", is the spec hash of the workflow the form was built from: the run
	// is refused (409 spec_changed) when the catalog's current version has another.
	SpecHash string `json:"spec_hash"`
}

// startRun answers POST /api/runs: it starts a run of a catalog workflow as the MCP server does
// (Engine.Submit), with origin "ui" (a remote origin: the run sees only the env_allow variables)
// and the trigger {"by": NAME}. 201 {"run_id", "workflow", "by"}; the engine's own checks of the
// inputs come back as 400 invalid_input whose error.details.problems lists [{input, message}];
// an unknown workflow is 404 not_found.
func (h *handler) startRun(w http.ResponseWriter, r *http.Request) {
	var b startBody
	if !readBody(w, r, &b) {
		return
	}
	by, ok := checkBy(w, b.By)
	if !ok {
		return
	}
	name := strings.TrimSpace(b.Workflow)
	if name == "" {
		writeError(w, http.StatusBadRequest, run.CodeInvalidInput, `workflow is empty: name a workflow of the catalog (GET /api/workflows lists them)`)
		return
	}
	if b.SpecHash != "" {
		if sp, ok := h.e.Workflow(name); ok && sp.Hash() != b.SpecHash {
			writeError(w, http.StatusConflict, run.CodeSpecChanged, fmt.Sprintf(
				"workflow %s changed since this form was loaded (spec %.12s, now %.12s): reload the form to see its current inputs", name, b.SpecHash, sp.Hash()))
			return
		}
	}
	id, err := h.e.Submit(r.Context(), engine.StartRequest{Workflow: name, Inputs: b.Inputs, Origin: engine.OriginUI,
		Trigger: map[string]any{"by": by}})
	if err != nil {
		writeEngineError(w, err)
		return
	}
	w.Header().Set("Location", "/api/runs/"+id)
	writeJSON(w, http.StatusCreated, map[string]any{"run_id": id, "workflow": name, "by": by})
}

func (h *handler) approve(w http.ResponseWriter, r *http.Request) {
	b, ok := readAction(w, r)
	if !ok {
		return
	}
	if b.Step == "" || b.Approved == nil {
		writeError(w, http.StatusBadRequest, run.CodeInvalidInput, `approve needs "step" (the step instance key of the open approval) and "approved" (true or false)`)
		return
	}
	id := r.PathValue("id")
	if err := h.e.Approve(r.Context(), id, b.Step, *b.Approved, b.Comment, b.By); err != nil {
		writeEngineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": id, "step": b.Step, "approved": *b.Approved, "by": b.By})
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	b, ok := readAction(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	// Cancel records a reason only: who cancelled is written into it.
	reason := "cancelled by " + b.By + " from the web dashboard"
	if b.Reason != "" {
		reason += ": " + b.Reason
	}
	if err := h.e.Cancel(r.Context(), id, reason); err != nil {
		writeEngineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": id, "by": b.By})
}

func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	b, ok := readAction(w, r)
	if !ok {
		return
	}
	force := make([]string, 0, len(b.Force))
	for _, s := range b.Force {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(force, s) {
			force = append(force, s)
		}
	}
	id, err := h.e.Resume(r.Context(), r.PathValue("id"), engine.ResumeOptions{ForceSteps: force, By: b.By})
	if err != nil {
		writeEngineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": id, "by": b.By})
}

func (h *handler) pause(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := readAction(w, r)
		if !ok {
			return
		}
		id := r.PathValue("id")
		var err error
		if pause {
			err = h.e.Pause(r.Context(), id, b.Reason, b.By)
		} else {
			err = h.e.Unpause(r.Context(), id, b.Reason, b.By)
		}
		if err != nil {
			writeEngineError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"run_id": id, "by": b.By})
	}
}

// workflowRow is a catalog entry with its version count, for GET /api/workflows.
type workflowRow struct {
	engine.CatalogEntry
	Versions int `json:"versions"`
}

func (h *handler) listWorkflows(w http.ResponseWriter, r *http.Request) {
	entries := h.e.Lookup("")
	out := make([]workflowRow, 0, len(entries))
	for _, ce := range entries {
		row := workflowRow{CatalogEntry: ce, Versions: ce.Version}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b workflowRow) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, map[string]any{"workflows": out})
}

func (h *handler) getWorkflow(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	sp, ok := h.e.Workflow(name)
	if !ok {
		writeError(w, http.StatusNotFound, run.CodeNotFound, fmt.Sprintf("no workflow named %q is registered", name))
		return
	}
	versions, err := h.e.WorkflowVersions(r.Context(), name)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	var entry *engine.CatalogEntry
	for _, ce := range h.e.Lookup(name) {
		if ce.Name == name {
			entry = &ce
			break
		}
	}
	if versions == nil {
		versions = []engine.WorkflowVersion{}
	}
	inputs := make([]formInput, 0, len(sp.Inputs))
	for _, in := range sp.Inputs {
		inputs = append(inputs, formInput{Name: in.Name, Type: in.Type, Required: in.Required, Default: in.Default,
			HasDefault: in.HasDefault, Format: in.Format, Description: in.Description, Enum: in.Enum})
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "entry": entry, "versions": versions, "graph": graphOf(sp),
		"spec_hash": sp.Hash(), "description": sp.Description, "inputs": inputs})
}

// formInput is a declared input of a workflow as the start form needs it (GET
// /api/workflows/NAME): its enum, and whether it has a default (a default may be null).
type formInput struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // string, number, integer, boolean, object, array or any
	Required    bool   `json:"required"`
	Default     any    `json:"default"`
	HasDefault  bool   `json:"has_default"`
	Format      string `json:"format,omitempty"`
	Description string `json:"description,omitempty"`
	Enum        []any  `json:"enum,omitempty"`
}

// scheduleRow is a schedule for GET /api/schedules: its spec, next fire and the last toggle
// made from the dashboard.
type scheduleRow struct {
	engine.ScheduleInfo
	ID       string  `json:"id"`
	Enabled  bool    `json:"enabled"`
	Workflow string  `json:"workflow"`
	Trigger  string  `json:"trigger"` // "cron 0 2 * * *", "every 15m", "webhook /hooks/x"
	Toggled  *toggle `json:"toggled,omitempty"`
}

func (h *handler) listSchedules(w http.ResponseWriter, r *http.Request) {
	infos := h.e.Schedules()
	out := make([]scheduleRow, 0, len(infos))
	h.mu.Lock()
	for _, si := range infos {
		row := scheduleRow{ScheduleInfo: si, ID: si.Spec.ID, Enabled: si.Spec.Enabled, Workflow: si.Spec.Workflow, Trigger: triggerText(si.Spec.Trigger)}
		if t, ok := h.toggles[si.Spec.ID]; ok {
			row.Toggled = &t
		}
		out = append(out, row)
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"schedules": out})
}

func triggerText(t flowtype.ScheduleTrigger) string {
	switch {
	case t.Expression != "":
		return "cron " + t.Expression
	case t.Every != "":
		return "every " + t.Every
	case t.Path != "":
		return "webhook " + t.Path
	}
	return string(t.Kind)
}

func (h *handler) scheduleFires(w http.ResponseWriter, r *http.Request) {
	limit := defaultFireRows
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			writeError(w, http.StatusBadRequest, run.CodeInvalidInput, fmt.Sprintf("limit %q must be a whole number from 1 to %d", s, MaxPageSize))
			return
		}
		limit = n
	}
	id := r.PathValue("id")
	if !h.hasSchedule(id) {
		writeError(w, http.StatusNotFound, run.CodeNotFound, fmt.Sprintf("no schedule %q", id))
		return
	}
	fires, err := h.e.ScheduleFires(r.Context(), id, limit)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	if fires == nil {
		fires = []engine.Fire{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"fires": fires})
}

func (h *handler) hasSchedule(id string) bool {
	for _, si := range h.e.Schedules() {
		if si.Spec.ID == id {
			return true
		}
	}
	return false
}

func (h *handler) setSchedule(enabled bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := readAction(w, r)
		if !ok {
			return
		}
		id := r.PathValue("id")
		if err := h.e.SetScheduleEnabled(id, enabled); err != nil {
			writeEngineError(w, err)
			return
		}
		h.mu.Lock()
		h.toggles[id] = toggle{By: b.By, At: time.Now().UTC(), Enabled: enabled}
		h.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "enabled": enabled, "by": b.By})
	}
}

// writeJSON answers status with v as JSON. encoding/json escapes <, > and & in strings, so no
// run data can close a tag of a page that would embed the answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, run.CodeInternal, "encoding the answer: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers status with {"error": {"code", "message"}}.
func writeError(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeEngineError answers an engine error with the HTTP status of its code.
func writeEngineError(w http.ResponseWriter, err error) {
	code := run.CodeOf(err)
	status := http.StatusInternalServerError
	switch code {
	case run.CodeInvalidInput, run.CodeInvalidRequest, run.CodeValidationFailed, run.CodeParseError, run.CodeTooLarge:
		status = http.StatusBadRequest
	case run.CodeNotFound:
		status = http.StatusNotFound
	case run.CodeInvalidState, run.CodeNotResumable, run.CodeSpecChanged, run.CodeUnknownTool, run.CodeReadOnly:
		status = http.StatusConflict
	case run.CodeClosed, run.CodeDBLocked:
		status = http.StatusServiceUnavailable
	}
	if errors.Is(err, context.Canceled) {
		status, code = 499, run.CodeCancelled
	}
	msg := err.Error()
	var details map[string]any
	var re *run.Error
	if errors.As(err, &re) {
		if re.Message != "" {
			msg = re.Message
		}
		details = re.Details
	}
	writeErrorDetails(w, status, code, msg, details)
}

// writeErrorDetails answers status with {"error": {"code", "message", "details"}}; details
// (e.g. invalid_input's "problems": [{input, message}], unknown_tool's "tools") is left out
// when empty.
func writeErrorDetails(w http.ResponseWriter, status int, code, message string, details map[string]any) {
	if len(details) == 0 {
		writeError(w, status, code, message)
		return
	}
	b, err := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": message, "details": details}})
	if err != nil {
		writeError(w, status, code, message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// searchQuery reads the search parameters of GET /api/runs into f: since and until (an RFC 3339
// time or an age: 2h, 7d), input=KEY=VALUE (repeatable), tool, step_status (comma-separated),
// error_kind, worker and error_text. Engine.Runs checks the values; this only parses them.
func searchQuery(q url.Values, f *engine.RunFilter) error {
	now := time.Now()
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s := q.Get(b.name); s != "" {
			t, err := engine.ParseTimeBound(b.name, s, now)
			if err != nil {
				return err
			}
			*b.t = t
		}
	}
	for _, kv := range q["input"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return &run.Error{Code: run.CodeInvalidInput, Message: fmt.Sprintf("input %.60q is not KEY=VALUE, e.g. input=shot=sh010", kv)}
		}
		if f.Inputs == nil {
			f.Inputs = map[string]string{}
		}
		if _, twice := f.Inputs[k]; twice {
			return &run.Error{Code: run.CodeInvalidInput, Message: fmt.Sprintf("input %.60q is given twice: a run has one value per input", k)}
		}
		f.Inputs[k] = v
	}
	for _, s := range strings.Split(q.Get("step_status"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.StepStatuses = append(f.StepStatuses, run.StepStatus(s))
		}
	}
	f.Tool, f.ErrorKind, f.Worker, f.ErrorText = q.Get("tool"), q.Get("error_kind"), q.Get("worker"), q.Get("error_text")
	return nil
}
