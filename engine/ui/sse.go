package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// maxStepMessages bounds the step messages of one flush: the step instances changed beyond it
// stay pending (their latest state kept) for the next flush, so a 10,000-item foreach costs
// the browser at most maxStepMessages messages per Coalesce interval.
const maxStepMessages = 200

// StepChange is the data of an SSE "step" event: a step instance whose state changed.
type StepChange struct {
	RunID    string       `json:"run_id"`
	Key      string       `json:"key"`
	Status   string       `json:"status"`
	Attempt  int          `json:"attempt,omitempty"`
	Progress run.Progress `json:"progress"` // the run's
}

// events answers GET /api/events?run=ID&from=SEQ with Server-Sent Events: "run" events (a
// RunSummary) for the runs whose state changed, at most one per run per Coalesce interval, and
// with run=, "step" events (StepChange) likewise per step instance. The id of each message is
// the sequence number of the newest event it includes, so a reconnecting EventSource
// (Last-Event-ID) goes on from there. Without from, only new events are sent.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	q := r.URL.Query()
	runID := q.Get("run")
	var from uint64
	for _, s := range []string{r.Header.Get("Last-Event-ID"), q.Get("from")} {
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, run.CodeInvalidInput, fmt.Sprintf("from %q must be an event sequence number", s))
			return
		}
		if s == r.Header.Get("Last-Event-ID") {
			n++ // the last one received: go on after it
		}
		from = n
		break
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if from == 0 {
		last, err := h.e.LastSeq(ctx)
		if err != nil {
			writeEngineError(w, err)
			return
		}
		from = last + 1
	}
	sub, err := h.e.Subscribe(ctx, engine.EventQuery{FromSeq: from, RunID: runID})
	if err != nil {
		writeEngineError(w, err)
		return
	}
	evs := make(chan run.Event, 256)
	go func() {
		defer sub.Close()
		defer close(evs)
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				return
			}
			select {
			case evs <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	// Each write must finish within WriteTimeout, so a client that stopped reading (its socket
	// buffers full) is cut instead of holding this goroutine and its subscription forever.
	send := func(write func() error) error {
		_ = rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout))
		if err := write(); err != nil {
			return err
		}
		return rc.Flush()
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := send(func() error {
		_, err := fmt.Fprintf(w, "retry: 2000\n: dcc-flow events from %d\n\n", from)
		return err
	}); err != nil {
		return
	}

	c := newCoalescer(runID != "", h.opts.Coalesce)
	tick := time.NewTicker(h.opts.Coalesce)
	defer tick.Stop()
	beat := time.NewTicker(h.opts.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				return // the engine closed, or the request ended
			}
			c.add(ev)
		case <-tick.C:
			if !c.pending() {
				continue
			}
			if err := send(func() error { return c.flush(ctx, h.e, w) }); err != nil {
				return
			}
		case <-beat.C:
			if err := send(func() error {
				_, err := fmt.Fprint(w, ": heartbeat\n\n")
				return err
			}); err != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// coalescer keeps the runs and step instances changed since the last flush, and the summaries
// of the runs it has seen (updated from the events, so a step event costs no database read).
type coalescer struct {
	steps     bool
	every     time.Duration        // the shortest interval between two messages about one run or step
	sentRun   map[string]time.Time // run id → when its last message was written
	sentStep  map[string]time.Time // run id + key → likewise
	runs      map[string]bool      // run id → must be read again (a run-level event)
	runOrder  []string
	stepByKey map[string]StepChange
	stepOrder []string
	summaries map[string]*RunSummary
	lastSeq   uint64
	now       func() time.Time // time.Now; a test's clock
}

func newCoalescer(steps bool, every time.Duration) *coalescer {
	return &coalescer{steps: steps, every: every, sentRun: map[string]time.Time{}, sentStep: map[string]time.Time{},
		runs: map[string]bool{}, stepByKey: map[string]StepChange{}, summaries: map[string]*RunSummary{}, now: time.Now}
}

func (c *coalescer) pending() bool { return len(c.runOrder) > 0 || len(c.stepOrder) > 0 }

func (c *coalescer) add(ev run.Event) {
	c.lastSeq = ev.Seq
	reread, seen := c.runs[ev.RunID]
	if !seen {
		c.runOrder = append(c.runOrder, ev.RunID)
	}
	// A run-level event (start, end, pause, resume) or an approval changes what the summary
	// says beyond progress: read the run again. Other step events update it in place.
	reread = reread || ev.StepKey == "" || ev.Type == run.EventApproveRequested || ev.Type == run.EventApproveResolved
	c.runs[ev.RunID] = reread
	if s := c.summaries[ev.RunID]; s != nil {
		s.Progress, s.UpdatedAt = ev.Progress, ev.Time
	}
	if !c.steps || ev.StepKey == "" {
		return
	}
	switch ev.Type {
	case run.EventStepLog: // lines, not a change of state
		return
	}
	k := ev.RunID + "\x00" + ev.StepKey
	prev, seen := c.stepByKey[k]
	if !seen {
		c.stepOrder = append(c.stepOrder, k)
	}
	ch := StepChange{RunID: ev.RunID, Key: ev.StepKey, Status: ev.Status, Attempt: ev.Attempt, Progress: ev.Progress}
	if ch.Status == "" { // step_progress carries no status
		ch.Status = prev.Status
	}
	c.stepByKey[k] = ch
}

// flush writes one "run" message per changed run and up to maxStepMessages "step" messages,
// skipping (keeping pending) the runs and steps that had a message less than c.every ago: a tick
// delayed by a slow flush must not send two messages about one run closer than that.
func (c *coalescer) flush(ctx context.Context, e *engine.Engine, w http.ResponseWriter) error {
	id := strconv.FormatUint(c.lastSeq, 10)
	now := c.now()
	keptRuns := c.runOrder[:0]
	for _, runID := range c.runOrder {
		if now.Sub(c.sentRun[runID]) < c.every {
			keptRuns = append(keptRuns, runID)
			continue
		}
		s := c.summaries[runID]
		if s == nil || c.runs[runID] {
			info, err := e.Status(ctx, runID)
			if err != nil {
				delete(c.runs, runID)
				continue // pruned meanwhile, or the engine is closing
			}
			sum := summaryOf(info)
			s = &sum
			c.summaries[runID] = s
		}
		if err := writeEvent(w, "run", id, s); err != nil {
			return err
		}
		c.sentRun[runID] = c.now()
		delete(c.runs, runID)
	}
	c.runOrder = keptRuns
	sent := 0
	keptSteps := c.stepOrder[:0]
	for _, k := range c.stepOrder {
		if sent == maxStepMessages || now.Sub(c.sentStep[k]) < c.every {
			keptSteps = append(keptSteps, k)
			continue
		}
		if err := writeEvent(w, "step", id, c.stepByKey[k]); err != nil {
			return err
		}
		sent++
		c.sentStep[k] = c.now()
		delete(c.stepByKey, k)
	}
	c.stepOrder = keptSteps
	if len(c.summaries) > 10000 { // a long-lived page over many runs: forget, read again
		clear(c.summaries)
	}
	if len(c.sentStep) > 100000 {
		for k, t := range c.sentStep {
			if now.Sub(t) >= c.every {
				delete(c.sentStep, k)
			}
		}
	}
	if len(c.sentRun) > 10000 {
		for k, t := range c.sentRun {
			if now.Sub(t) >= c.every {
				delete(c.sentRun, k)
			}
		}
	}
	return nil
}

func writeEvent(w http.ResponseWriter, name, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\nid: %s\ndata: %s\n\n", name, id, b)
	return err
}
