package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/openlineage"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// OpenLineageConfig turns on OpenLineage run events (docs/guide/openlineage.md): for every
// attempt of a tool step that read or wrote files, a START and a COMPLETE or FAIL event with
// the files as input and output datasets, sent to URL, appended to File, or both. Sending never
// slows a run: events wait in a queue of QueueSize that one goroutine delivers.
type OpenLineageConfig struct {
	// URL is an http:// or https:// endpoint taking one POSTed event per request (Marquez:
	// http://marquez:5000/api/v1/lineage); "" = none.
	URL string `json:"url,omitempty"`
	// File is a JSON-lines file each event is appended to (created when missing; its folder
	// must exist); "" = none. At least one of URL and File is required.
	File string `json:"file,omitempty"`
	// Namespace is the OpenLineage job namespace of every event; "" = "dcc-flow".
	Namespace string `json:"namespace,omitempty"`
	// APIKeyEnv names the environment variable holding the API key sent as "Authorization:
	// Bearer KEY" with every POST (URL only); read when the engine opens, which fails when it
	// is unset or empty. "" = no key.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// TimeoutSecs bounds one POST (connect, send, answer), and how long Close waits for the
	// events still queued: 0 = 5 seconds; otherwise 0.01 to 3600.
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`
	// QueueSize is how many events may wait to be sent: 0 = 1,000; otherwise 1 to 1,000,000.
	// When that many wait, a new event is dropped and counted.
	QueueSize int `json:"queue_size,omitempty"`
	// Producer is the URI stamped as the events' producer; "" =
	// "https://github.com/dcc-flow/dcc-flow".
	Producer string `json:"producer,omitempty"`
}

// MaxOpenLineageQueue is the largest openlineage.queue_size.
const MaxOpenLineageQueue = 1_000_000

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// check adds the problems of the openlineage section to ps, each naming its field
// ("openlineage.url: …").
func (o *OpenLineageConfig) check(ps *configProblems) {
	if o == nil {
		return
	}
	const f = "openlineage"
	if strings.TrimSpace(o.URL) == "" && strings.TrimSpace(o.File) == "" {
		ps.add(f, "neither url nor file is set: set url to an HTTP endpoint taking OpenLineage events "+
			"(e.g. http://localhost:5000/api/v1/lineage for Marquez), or file to a JSON-lines file to append them to, "+
			"or leave the openlineage section out")
	}
	if strings.TrimSpace(o.URL) != "" {
		if err := (openlineage.Config{URL: o.URL}).Validate(); err != nil {
			ps.add(f+".url", "%s", strings.TrimPrefix(err.Error(), "openlineage: "))
		}
	}
	if o.File != "" {
		if err := (openlineage.Config{File: o.File}).Validate(); err != nil {
			ps.add(f+".file", "%s", strings.TrimPrefix(err.Error(), "openlineage: "))
		} else if fi, err := os.Stat(filepath.Dir(o.File)); err != nil || !fi.IsDir() {
			ps.add(f+".file", "the folder of %q does not exist: create it, or give a path in an existing folder", o.File)
		} else if fi, err := os.Stat(o.File); err == nil && !fi.Mode().IsRegular() {
			ps.add(f+".file", "%q is not a regular file: give the path of a JSON-lines file", o.File)
		}
	}
	if o.Namespace != "" && strings.TrimSpace(o.Namespace) == "" {
		ps.add(f+".namespace", "is blank: give a name such as \"studio-prod\", or leave it out for \"dcc-flow\"")
	}
	if o.APIKeyEnv != "" {
		switch {
		case !envNameRe.MatchString(o.APIKeyEnv):
			ps.add(f+".api_key_env", "%q is not an environment variable name (letters, digits and _, not starting with a digit)", o.APIKeyEnv)
		case strings.TrimSpace(o.URL) == "":
			ps.add(f+".api_key_env", "is set without url: set url too, or drop api_key_env (a file needs no key)")
		}
	}
	if o.TimeoutSecs != 0 && !(o.TimeoutSecs >= 0.01 && o.TimeoutSecs <= 3600) || math.IsNaN(o.TimeoutSecs) {
		ps.add(f+".timeout_secs", "must be 0 (the default, 5) or 0.01 to 3600 seconds; got %v", o.TimeoutSecs)
	}
	if o.QueueSize < 0 || o.QueueSize > MaxOpenLineageQueue {
		ps.add(f+".queue_size", "must be 0 (the default, 1,000) or 1 to 1,000,000 events; got %d", o.QueueSize)
	}
	if o.Producer != "" {
		if err := (openlineage.Config{File: "x", Producer: o.Producer}).Validate(); err != nil {
			ps.add(f+".producer", "%s", strings.TrimPrefix(err.Error(), "openlineage: "))
		}
	}
}

func (o *OpenLineageConfig) timeout() time.Duration {
	if o.TimeoutSecs <= 0 {
		return openlineage.DefaultTimeout
	}
	return time.Duration(o.TimeoutSecs * float64(time.Second))
}

// olEmitter is the engine's OpenLineage emitter; its zero value (OpenLineage off) does nothing.
type olEmitter struct {
	em      *openlineage.Emitter // nil = off
	timeout time.Duration        // how long Close waits for the queue
	lastErr atomic.Pointer[string]
}

// openLineage starts the emitter of the openlineage section cfg (checked by Config.validate),
// reading its API key from environ; without the section (cfg nil) it returns an olEmitter that
// does nothing. Errors are code invalid_request naming openlineage.FIELD.
func openLineage(cfg *OpenLineageConfig, environ func() []string) (*olEmitter, error) {
	l := &olEmitter{}
	if cfg == nil {
		return l, nil
	}
	oc := openlineage.Config{URL: cfg.URL, File: cfg.File, Namespace: cfg.Namespace, Timeout: cfg.timeout(),
		QueueSize: cfg.QueueSize, Producer: cfg.Producer, OnError: l.report}
	if cfg.APIKeyEnv != "" {
		oc.APIKey = getenv(environ(), cfg.APIKeyEnv)
		switch {
		case oc.APIKey == "":
			return nil, run.Errorf(run.CodeInvalidRequest, "invalid engine config: openlineage.api_key_env: the environment variable %s is not set or empty: set it to the API key of the lineage endpoint, or drop api_key_env", cfg.APIKeyEnv)
		case strings.ContainsAny(oc.APIKey, "\r\n\x00"):
			// It would end the Authorization header (the key itself stays out of the message).
			return nil, run.Errorf(run.CodeInvalidRequest, "invalid engine config: openlineage.api_key_env: the value of %s contains a line break or NUL byte: set it to the key alone", cfg.APIKeyEnv)
		}
	}
	em, err := openlineage.New(oc)
	if err != nil {
		return nil, run.Errorf(run.CodeInvalidRequest, "invalid engine config: %s", err.Error())
	}
	l.em, l.timeout = em, cfg.timeout()
	return l, nil
}

// getenv is the value of name in env ("KEY=value" strings; the last one wins), "" when absent.
func getenv(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

func (l *olEmitter) report(err error) {
	s := err.Error()
	l.lastErr.Store(&s)
}

// onAttemptEnd sends the START and the COMPLETE or FAIL of an attempt that read or wrote files
// (exec.Config.OnAttemptEnd). It never blocks.
func (l *olEmitter) onAttemptEnd(a exec.AttemptEnd) {
	if l.em == nil || len(a.Files) == 0 {
		return
	}
	at := a.Attempt
	ev := openlineage.Event{
		Type: openlineage.Start, Time: at.StartedAt, RunID: at.RunID, StepKey: at.StepKey, Attempt: at.Attempt,
		Workflow: a.Workflow, Tool: at.Tool, ParentRunID: a.ParentRunID,
	}
	for _, f := range a.Files {
		d := openlineage.Dataset{Path: f.Path, Hash: f.Hash, Size: f.Size}
		switch f.Role {
		case store.FileRead:
			ev.Inputs = append(ev.Inputs, d)
		case store.FileWrite:
			ev.Outputs = append(ev.Outputs, d)
		}
	}
	if len(at.Env) > 0 {
		var env map[string]any
		if json.Unmarshal(at.Env, &env) == nil {
			ev.Env = env
		}
	}
	l.em.Emit(ev)
	ev.Type, ev.Time = openlineage.Complete, at.FinishedAt
	if at.Status != run.StepCompleted {
		ev.Type, ev.ErrorMessage, ev.ErrorTrace = openlineage.Fail, at.ErrorMessage, at.ErrorTrace
	}
	l.em.Emit(ev)
}

// close flushes the queue for at most the configured timeout (or until ctx ends); what is
// left is counted as failed.
func (l *olEmitter) close(ctx context.Context) {
	if l == nil || l.em == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	_ = l.em.Close(cctx) // the count and the last error say what was lost
}

// OpenLineageStats counts the OpenLineage events of an engine (docs/guide/openlineage.md).
type OpenLineageStats struct {
	// Enabled says whether the engine config has an openlineage section.
	Enabled bool `json:"enabled"`
	// Delivered reached every place configured; Dropped found the queue full; Failed could not
	// be sent or written (the endpoint kept failing, Close gave up on them).
	Delivered int64 `json:"delivered"`
	Dropped   int64 `json:"dropped"`
	Failed    int64 `json:"failed"`
	// LastError is the most recent problem ("" when none), naming the event, the attempt and
	// the cause, e.g. `openlineage: COMPLETE event of wf.export attempt 1 (run r-1) not sent
	// to http://marquez:5000/api/v1/lineage after 4 tries: HTTP 503 Service Unavailable`.
	LastError string `json:"last_error,omitempty"`
}

// OpenLineageStats returns the counts of the engine's OpenLineage events.
func (e *Engine) OpenLineageStats() OpenLineageStats {
	l := e.ol
	if l == nil || l.em == nil {
		return OpenLineageStats{}
	}
	s := OpenLineageStats{Enabled: true, Delivered: l.em.Delivered(), Dropped: l.em.Dropped(), Failed: l.em.Failed()}
	if p := l.lastErr.Load(); p != nil {
		s.LastError = *p
	}
	return s
}

// String is a one-line summary for messages.
func (s OpenLineageStats) String() string {
	return fmt.Sprintf("openlineage: %d delivered, %d dropped, %d failed", s.Delivered, s.Dropped, s.Failed)
}
