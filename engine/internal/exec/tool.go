package exec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

type retryDetail struct {
	Error   errorDetail `json:"error"`
	DelayMs int64       `json:"delay_ms"`
	// Worker is the pool worker ("POOL/PID") of the failed attempt, when it ran on one.
	Worker string `json:"worker,omitempty"`
	// Abandoned describes the failed attempt when it timed out and its host thread did not stop
	// (tools.AbandonedError): the next attempt starts only once that thread left the tool.
	Abandoned *abandonedDetail `json:"abandoned,omitempty"`
}

// abandonedDetail is an abandoned attempt in a step_retry event's detail.
type abandonedDetail struct {
	Attempt int    `json:"attempt"`
	Thread  string `json:"thread,omitempty"`
	// WaitsForIt: the next attempt waits until the host lets go of this one.
	WaitsForIt bool `json:"next_attempt_waits"`
}

// runTool runs a tool or tool_remote step: idempotency lookup, then attempts with per-attempt
// timeouts and retries.
func (r *runner) runTool(ctx context.Context, in *inst) stepEnd {
	sp := in.sp
	r.leafStart()
	defer r.leafEnd()

	args, _ := sp.args.render(in.f.resolve).(map[string]any)
	call := tools.Call{RunID: r.id, Ancestors: r.ancestors, StepKey: in.row.Key, Tool: sp.st.Tool, DCC: sp.st.DCC, Args: args}
	if sp.pool != "" {
		call.DCC, call.Pooled, call.PoolOptional = sp.pool, true, sp.poolOpt
	}

	var idemKey string
	if sp.idem != nil || sp.auto {
		idemKey = r.idempotencyKey(sp, in.f, args)
	}
	if idemKey != "" && !r.forced[in.row.Key] && !r.forced[sp.st.ID] { // a forced step is called again
		e, hit, err := r.x.cfg.Store.GetIdempotency(context.Background(), string(sp.st.Policy.IdempotencyScope), r.idemRunID(sp), idemKey, r.now())
		if err != nil {
			return stepEnd{status: run.StepFailed, errKind: run.KindError, errMsg: "reading the idempotency cache: " + err.Error()}
		}
		if hit {
			end := stepEnd{status: run.StepCompleted, hasOutput: true, outputJSON: e.Output, lazy: true, refsJSON: e.FileRefs, cached: true}
			if len(e.Output) == 0 {
				end.outputJSON = []byte("null")
			}
			if len(e.FileRefs) > 0 {
				_ = json.Unmarshal(e.FileRefs, &end.fileRefs)
			}
			in.setAttempt(0)
			return end
		}
	}

	// The step's declared files, and its content cache (assets.go).
	sf, ferr := r.declaredReads(sp, in.f)
	if ferr != nil {
		return r.filesError(sp, "reads", ferr)
	}
	var cacheKey string
	var cacheParts json.RawMessage
	if sp.st.Policy.Cache != nil {
		var err error
		if cacheKey, cacheParts, err = r.cacheKey(sp, in.f, args, sf); err != nil {
			return stepEnd{status: run.StepFailed, errKind: run.KindError, errMsg: fmt.Sprintf("step %q: computing its cache key: %v", sp.st.ID, err)}
		}
		if !r.forced[in.row.Key] && !r.forced[sp.st.ID] { // a forced step is called again
			hit, miss, err := r.cacheLookup(ctx, sp, in.row.Key, cacheKey, cacheParts, sf)
			if err != nil {
				return stepEnd{status: run.StepFailed, errKind: run.KindError, errMsg: "reading the content cache: " + err.Error()}
			}
			if hit != nil {
				var d cacheFrom
				d.Cached = true
				d.Cache.Key, d.Cache.RunID, d.Cache.StepKey, d.Cache.Attempt = cacheKey, hit.RunID, hit.StepKey, hit.Attempt
				end := stepEnd{status: run.StepCompleted, hasOutput: true, outputJSON: hit.Output, lazy: true, refsJSON: hit.FileRefs, cached: true}
				end.cacheHit, _ = json.Marshal(d)
				if len(hit.Output) == 0 {
					end.outputJSON = []byte("null")
				}
				if len(hit.FileRefs) > 0 {
					_ = json.Unmarshal(hit.FileRefs, &end.fileRefs)
				}
				in.setAttempt(0)
				r.trace.Cache(in.row.Key, hit.RunID, hit.StepKey, hit.Attempt, "") // trace.go: an event of the run's span
				return end
			}
			r.trace.Cache(in.row.Key, "", "", 0, miss)
			if in.enterPending {
				in.enter.Detail = cacheMissDetail(cacheKey, miss, cacheParts)
			}
		}
	}

	// What each attempt's record keeps of the args: secrets redacted, bounded (attempt.go).
	var secretNames map[string]bool
	localCall := false
	if !sp.remote() {
		secretNames, localCall = r.x.secrets.toolRecord(r.x.cfg.Router, sp.st.Tool)
	}
	attArgs := sp.recordedArgs(in, args, secretNames)

	rp := sp.retry
	maxAttempts := 1
	if rp != nil {
		maxAttempts = rp.MaxAttempts
	}
	var abandoned *tools.AbandonedError // the last attempt's, when its thread did not stop
	toHost := !sp.remote() && r.x.cfg.Router.ToHost(sp.st.Tool)
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if end, ok := r.waitRetry(ctx, in, rp, attempt, abandoned, attArgs, localCall); !ok {
				return end
			}
		} else {
			in.beginAttempt(1, attArgs, localCall)
		}
		if attempt > 1 {
			in.setAttempt(attempt) // already set for attempt 1
			if sf, ferr = r.declaredReads(sp, in.f); ferr != nil {
				return r.filesError(sp, "reads", ferr)
			}
		}
		if toHost {
			// Counted once a host thread takes the call: one that waits in its lane and is
			// cancelled there never started (a seal records the attempts that did).
			in.liveAttempt.Store(int32(attempt - 1))
			n := int32(attempt)
			in.pulledAt.Store(0)
			call.Started = func() {
				in.liveAttempt.Store(n)
				in.pulledAt.Store(r.now().UnixNano()) // the attempt starts when a host thread takes it
				in.hostStarted()
			}
		}
		if in.enterPending && (sp.remote() || !r.x.cfg.Router.Inline(sp.st.Tool) || len(r.stepResources(sp)) > 0) {
			// The call may block (a host or remote tool, a blocking built-in, a wait for
			// resources): the step is written as running first.
			if err := in.flushEnter(); err != nil {
				return r.stoppedEnd(r.ctx)
			}
		}
		// Output lines and progress carry the attempt record's number (counted across resumes).
		rep := in.startReport(r.attemptBase[in.row.Key] + attempt)
		call.Reporter = nil
		if rep != nil {
			call.Reporter = rep
		}
		// The first attempt of an instance an earlier execution started (a resume, a
		// takeover) takes over its call if that execution left one in flight on the queue.
		call.Adopt = attempt == 1 && r.priorKeys[in.row.Key] && !r.forced[in.row.Key] && !r.forced[sp.st.ID]
		call.AdoptAttempt = 0
		if call.Adopt {
			call.AdoptAttempt = r.priorAttempt[in.row.Key]
		}
		cs := in.startSpans(&call, r.attemptBase[in.row.Key]+attempt) // trace.go
		res, err := r.attempt(withTraceparent(ctx, call.Traceparent), in, call, attempt, cs)
		endCall(cs, res, err)
		in.endReport(rep)
		if errors.Is(err, store.ErrConnectionLost) {
			// Whether the call was queued is unknown: stop orchestrating the run, as when a
			// write's outcome is unknown; the resume adopts the call if it was queued.
			r.cancel(errConnectionLost)
			return r.stoppedEnd(r.ctx)
		}
		in.row.Worker = res.Worker
		addLogs(&in.row, r.attemptBase[in.row.Key]+attempt, res.Logs, res.LogsDropped)
		if ctx.Err() != nil {
			if res.NotStarted {
				in.setAttempt(attempt - 1) // it never began: not an attempt made
			}
			in.endAttempt(run.StepCancelled, res.Worker, run.KindCancelled, "the run stopped during the attempt", "")
			return r.stoppedEnd(ctx)
		}
		abandoned = nil
		kind, msg, trace := "", "", ""
		final := false // a failure no attempt can change (args that break the tool's schema)
		files, ferr := r.attemptFiles(ctx, in, sf, res)
		in.attFiles = files
		in.att.Env = res.Env
		if in.att.Env == nil {
			in.att.Env = r.x.cfg.Env
		}
		switch {
		case ferr != nil:
			fe := r.filesError(sp, "files", ferr)
			kind, msg, final = fe.errKind, fe.errMsg, true
		case err != nil:
			var at *attemptTimeout
			if errors.As(err, &at) {
				kind = run.KindTimeout
			} else {
				kind = run.KindError
			}
			errors.As(err, &abandoned)
			msg = err.Error()
		case res.Error != nil:
			kind, msg, trace = res.Error.Kind, res.Error.Message, res.Error.Trace
			final = res.Error.Final
			if kind == "" {
				kind = run.KindError
			}
		default:
			end, ok := r.success(in, res)
			if !ok {
				kind, msg = end.errKind, end.errMsg
				break
			}
			if idemKey != "" {
				end.idem = r.idempotencyEntry(sp, idemKey, end)
			}
			in.endAttempt(run.StepCompleted, res.Worker, "", "", "")
			if cacheKey != "" {
				end.cacheEntry = r.cacheEntry(sp, in, cacheKey, cacheParts, end, files)
			}
			return end
		}
		in.endAttempt(run.StepFailed, res.Worker, kind, msg, trace)
		in.row.ErrorKind, in.row.ErrorMessage, in.row.ErrorTrace = kind, msg, trace
		if attempt < maxAttempts && !final && rp.IsRetryable(kind) {
			in.unhost() // a failed attempt: nothing of it needs keeping
			continue
		}
		return stepEnd{status: run.StepFailed, errKind: kind, errMsg: msg, errTrace: trace}
	}
}

// addLogs appends the output lines of an attempt to the step record, keeping the newest within
// run.MaxStepLogLines and run.MaxStepLogBytes; dropped counts lines the tool's side left out.
func addLogs(row *store.Step, attempt int, lines []run.LogLine, dropped int) {
	if len(lines) == 0 && dropped == 0 {
		return
	}
	var all []run.LogLine
	if len(row.Logs) > 0 {
		_ = json.Unmarshal(row.Logs, &all) // written by this function: valid
	}
	for _, l := range lines {
		l.Attempt = attempt
		all = append(all, l)
	}
	kept, cut := run.CapLogs(all)
	row.LogsDropped += dropped + cut
	row.Logs = nil
	if len(kept) > 0 {
		row.Logs, _ = json.Marshal(kept)
	}
}

// attempt makes one call under the per-attempt timeout, once it holds the step's resources
// (a wait for them is an event of the attempt's span cs, and the call's span starts after it).
func (r *runner) attempt(ctx context.Context, in *inst, call tools.Call, attempt int, cs *tracing.Call) (tools.Result, error) {
	sp := in.sp
	call.Attempt = attempt
	var since time.Time // when the wait for resources began: only a traced step with resources says it
	if cs != nil && r.x.cfg.Resources != nil {
		since = time.Now()
	}
	release, rerr := r.holdResources(ctx, in, call)
	if rerr != nil {
		return tools.Result{NotStarted: true}, rerr
	}
	defer release()
	if !since.IsZero() {
		if amounts := r.stepResources(sp); len(amounts) > 0 {
			cs.Waited(since, DescribeAmounts(amounts))
		}
	}
	actx := ctx
	switch {
	case sp.timeout <= 0:
	case !sp.remote() && r.x.cfg.Router.ToHost(call.Tool):
		// The host times it from when a thread starts it, and interrupts it (tools.Host).
		call.Timeout, call.TimeoutErr = sp.timeout, &attemptTimeout{attempt: attempt, d: sp.timeout}
	default:
		var cancel context.CancelFunc
		actx, cancel = clock.WithTimeout(ctx, r.x.cfg.Clock, sp.timeout, &attemptTimeout{attempt: attempt, d: sp.timeout})
		defer cancel()
		call.Deadline = r.now().Add(sp.timeout)
	}
	var res tools.Result
	var err error
	if sp.remote() {
		res, err = r.x.cfg.Router.CallRemote(actx, call)
	} else {
		res, err = r.x.cfg.Router.Call(actx, call)
	}
	if actx.Err() != nil && ctx.Err() == nil && (err != nil || res.Error == nil) {
		// The attempt ran out of time (an answer after the deadline is dropped).
		err = context.Cause(actx)
	}
	return res, err
}

// success turns a tool's output into the step's end; ok is false when the output is unusable.
func (r *runner) success(in *inst, res tools.Result) (stepEnd, bool) {
	end := stepEnd{status: run.StepCompleted, hasOutput: true}
	if res.OutputJSON != nil {
		raw := bytes.TrimSpace(res.OutputJSON)
		if !json.Valid(raw) {
			var out any
			err := json.Unmarshal(raw, &out)
			return stepEnd{errKind: run.KindError, errMsg: fmt.Sprintf("the tool's output is not valid JSON: %v", err)}, false
		}
		end.outputJSON = raw
		if !bytes.Contains(raw, []byte(`"file_refs"`)) {
			end.lazy = true // decoded only if a template or JSONPath reads it
			return end, true
		}
		end.output, _ = spec.DecodeValue(raw) // valid (checked above); large integers stay exact
	} else {
		end.output = res.Output
		b, err := marshalJSON(res.Output)
		if err != nil {
			return stepEnd{errKind: run.KindError, errMsg: "the tool's output is not JSON-encodable: " + err.Error()}, false
		}
		end.outputJSON = b
	}
	end.fileRefs, end.refsJSON = r.captureFileRefs(end.output)
	return end, true
}

func (r *runner) idemRunID(sp *stepPlan) string {
	if sp.st.Policy.IdempotencyScope == spec.ScopeGlobal {
		return ""
	}
	return r.id
}

// idempotencyKey renders the step's key. Keys are namespaced by tool ("dcc/tool" for remote
// tools) so two tools never share an entry; "auto" is the sha256 of the tool and the canonical
// rendered args.
func (r *runner) idempotencyKey(sp *stepPlan, f *frame, args map[string]any) string {
	tool := sp.st.Tool
	if sp.kind == spec.KindToolRemote {
		tool = sp.st.DCC + "/" + tool
	}
	if sp.auto {
		b, err := spec.CanonicalValue(args)
		if err != nil {
			b = []byte(template.Stringify(args))
		}
		sum := sha256.Sum256(append([]byte(tool+"\x00"), b...))
		return tool + "|auto:" + hex.EncodeToString(sum[:])
	}
	return tool + "|" + template.Stringify(sp.idem.Render(f.resolve))
}

func (r *runner) idempotencyEntry(sp *stepPlan, key string, end stepEnd) *store.IdempotencyEntry {
	now := r.now()
	e := &store.IdempotencyEntry{Scope: string(sp.st.Policy.IdempotencyScope), RunID: r.idemRunID(sp), Key: key,
		Output: end.outputJSON, FileRefs: end.refsJSON, CreatedAt: now}
	if ttl := sp.st.Policy.IdempotencyTTLSecs; ttl > 0 {
		e.ExpiresAt = now.Add(time.Duration(ttl) * time.Second)
	}
	return e
}

// remote reports whether the step's calls go to a remote: a tool_remote step, or a tool step
// routed to a worker pool.
func (sp *stepPlan) remote() bool { return sp.kind == spec.KindToolRemote || sp.pool != "" }

// waitRetry starts attempt (> 1) of in: it records the retry (step_retry with the failed
// attempt's error and pool worker, its progress cleared), sleeps the policy's delay, waits for
// the host thread of an abandoned attempt to leave the tool (two attempts of a step never run
// at once), waits at the pause gate (a retry whose delay ends while the run is paused waits for
// the unpause, its row still retrying) and marks the step running again. ok is false when the
// run stopped meanwhile; end is then the step's end.
func (r *runner) waitRetry(ctx context.Context, in *inst, rp *spec.RetryPolicy, attempt int, abandoned *tools.AbandonedError, attArgs json.RawMessage, localCall bool) (end stepEnd, ok bool) {
	delay := rp.Jittered(rp.NextDelay(attempt), r.x.cfg.Rand)
	in.row.Status = run.StepRetrying
	in.row.Progress = nil    // the progress of the attempt that failed
	in.row.Attempt = attempt // the attempt to come; counted in a seal once it starts
	rd := retryDetail{Error: errorDetail{Kind: in.row.ErrorKind, Message: in.row.ErrorMessage}, DelayMs: delay.Milliseconds(), Worker: in.row.Worker}
	var letGo <-chan struct{}
	if abandoned != nil {
		letGo, _, _, _ = r.x.cfg.Router.Host().InFlight(r.id, in.row.Key)
		rd.Abandoned = &abandonedDetail{Attempt: abandoned.Attempt, Thread: abandoned.Thread, WaitsForIt: letGo != nil}
	}
	if err := in.save(run.EventStepRetry, jsonDetail(rd)); err != nil {
		return r.stoppedEnd(r.ctx), false
	}
	if err := clock.Sleep(ctx, r.x.cfg.Clock, delay); err != nil {
		return r.stoppedEnd(ctx), false
	}
	if letGo != nil {
		select { // the abandoned attempt's thread is still in the tool
		case <-letGo:
		case <-ctx.Done():
			return r.stoppedEnd(ctx), false
		}
	}
	if r.enterGate(ctx) != nil {
		return r.stoppedEnd(ctx), false
	}
	in.row.Status = run.StepRunning
	if in.sp.kind == spec.KindTool || in.sp.kind == spec.KindToolRemote {
		in.beginAttempt(attempt, attArgs, localCall) // written with the running row
	}
	err := in.save("", nil)
	r.pauseMu.RUnlock()
	if err != nil {
		return r.stoppedEnd(r.ctx), false
	}
	return stepEnd{}, true
}
