package resources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/startstop"
)

// Probe bounds (docs/guide/resources.md, "Live counts").
const (
	// DefaultProbeEvery is how often a probe runs when its every_secs is 0.
	DefaultProbeEvery = 30 * time.Second
	// DefaultProbeTimeout is how long one run of a probe may take when its timeout_secs is 0.
	DefaultProbeTimeout = 10 * time.Second
	// MaxProbeOutput is the most a probe may print (stdout); more is garbage.
	MaxProbeOutput = 1 << 20
	// MaxProbeFree is the largest free count a parser accepts.
	MaxProbeFree = 1_000_000_000
)

// Probe states, as ProbeStatus.State.
const (
	// ProbePending: the probe has not finished a run yet; the declared limit holds.
	ProbePending = "pending"
	// ProbeOK: its last run gave a free count; the effective limit follows it.
	ProbeOK = "ok"
	// ProbeFailed: its last run failed (exit ≠ 0, timed out, or output the parser refused); the
	// declared limit holds until a run succeeds.
	ProbeFailed = "failed"
)

// ProbeParser turns a probe's output into the free count (≥ 0).
type ProbeParser func(out []byte) (int, error)

// ProbeSpec is the probe of one resource.
type ProbeSpec struct {
	Resource string
	// Declared is the resource's declared limit: the effective limit is never above it, and is
	// it again when the probe fails.
	Declared int
	// Command is the argv run (no shell); Command[0] is looked up in PATH.
	Command []string
	// Every is the period (> 0), Timeout the bound of one run (> 0).
	Every, Timeout time.Duration
	Parse          ProbeParser
}

// ProbeStatus is the state of one resource's probe.
type ProbeStatus struct {
	// State is ProbePending, ProbeOK or ProbeFailed.
	State string
	// Free is what the last successful run said is free (the current count when State is
	// ProbeOK; kept through later failures); FreeAt is when that run ended, zero before any
	// run succeeded.
	Free   int
	FreeAt time.Time
	// Effective is the limit the scheduler applies now: min(declared, Free + the units this
	// engine holds) when ok, else the declared limit.
	Effective int
	// Error says why the last run failed ("" unless State is ProbeFailed).
	Error string
	// Since is when State (or, for ProbeFailed, Error's kind) last changed; Checked is when the
	// last run ended. Zero before the first run.
	Since, Checked time.Time
}

// ProbeRunner runs argv and returns its standard output; the default runs the command with
// RunProbeCommand.
type ProbeRunner func(ctx context.Context, argv []string) ([]byte, error)

// Prober runs the probes of the resources of a Scheduler, each every its period on the
// scheduler's clock, and sets each resource's limit from the free count it reads
// (Scheduler.ApplyFree) or back to the declared limit when it fails. It is a
// startstop.Service. OnChange is told, once per change of state (not at every run), what
// changed: a warning when a probe starts failing or fails differently, a notice when it
// recovers.
type Prober struct {
	sched    *Scheduler
	clock    clock.Clock
	specs    []ProbeSpec
	run      ProbeRunner
	onChange func(resource string, st ProbeStatus, message string)

	mu     sync.Mutex
	status map[string]ProbeStatus
	group  startstop.Group
	// checked, when set (tests), is called after each Check has applied its result.
	checked func(resource string)
}

// NewProber returns the prober of specs on s (their resources declared in s). run nil =
// RunProbeCommand; onChange may be nil.
func NewProber(s *Scheduler, specs []ProbeSpec, run ProbeRunner, onChange func(resource string, st ProbeStatus, message string)) *Prober {
	if run == nil {
		run = RunProbeCommand
	}
	p := &Prober{sched: s, clock: s.clock, specs: specs, run: run, onChange: onChange, status: map[string]ProbeStatus{}}
	for _, sp := range specs {
		p.status[sp.Resource] = ProbeStatus{State: ProbePending, Effective: sp.Declared}
	}
	return p
}

// Start runs each probe once (all at once, each bounded by its timeout; ctx ending stops them
// and leaves those states pending), so that the limits are the licence server's before the
// first step asks, then starts one periodic loop per probe, the next run a period later.
func (p *Prober) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, sp := range p.specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Check(ctx, sp.Resource)
		}()
	}
	wg.Wait()
	var svcs []startstop.Service
	for _, sp := range p.specs {
		svcs = append(svcs, &startstop.Periodic{Clock: p.clock, Period: sp.Every, Delay: true, Fn: func(ctx context.Context) { p.Check(ctx, sp.Resource) }})
	}
	return p.group.Start(ctx, svcs...)
}

// Stop stops the loops, killing a probe in progress.
func (p *Prober) Stop() { p.group.Stop() }

// Status returns the probe state of resource; ok is false when it has no probe.
func (p *Prober) Status(resource string) (ProbeStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.status[resource]
	return st, ok
}

// Check runs the probe of resource once, now, and applies what it says; it returns the new
// state. A resource without a probe returns a zero ProbeStatus.
func (p *Prober) Check(ctx context.Context, resource string) ProbeStatus {
	var sp *ProbeSpec
	for i := range p.specs {
		if p.specs[i].Resource == resource {
			sp = &p.specs[i]
		}
	}
	if sp == nil {
		return ProbeStatus{}
	}
	rctx, cancel := clock.WithTimeout(ctx, p.clock, sp.Timeout, errProbeTimeout)
	out, err := p.run(rctx, sp.Command)
	timedOut := errors.Is(context.Cause(rctx), errProbeTimeout)
	cancel()
	if ctx.Err() != nil { // the engine is stopping: not the probe's fault
		st, _ := p.Status(resource)
		return st
	}
	free := 0
	switch {
	case timedOut:
		err = fmt.Errorf("timed out after %s (killed); raise timeout_secs or fix the command", sp.Timeout)
	case err != nil:
	default:
		free, err = sp.Parse(out)
		if err != nil {
			err = fmt.Errorf("output not understood: %w", err)
		}
	}
	now := p.clock.Now()
	p.mu.Lock()
	old := p.status[resource]
	st := ProbeStatus{Checked: now, Since: old.Since, Free: old.Free, FreeAt: old.FreeAt}
	var msg string
	if err != nil {
		st.State, st.Error, st.Effective = ProbeFailed, err.Error(), sp.Declared
		p.sched.SetLimit(resource, sp.Declared)
		if old.State != ProbeFailed || probeErrorKind(old.Error) != probeErrorKind(st.Error) {
			st.Since = now
			msg = fmt.Sprintf("resource %s: its probe %s failed: %s; using the declared limit %d until it succeeds", resource, sp.Command[0], st.Error, sp.Declared)
		}
	} else {
		st.State, st.Free, st.FreeAt = ProbeOK, free, now
		st.Effective = p.sched.ApplyFree(resource, sp.Declared, free)
		if old.State != ProbeOK {
			st.Since = now
			if old.State == ProbeFailed {
				msg = fmt.Sprintf("resource %s: its probe works again: %d free, effective limit %d", resource, free, st.Effective)
			}
		}
	}
	p.status[resource] = st
	p.mu.Unlock()
	if msg != "" && p.onChange != nil {
		p.onChange(resource, st, msg)
	}
	p.mu.Lock()
	checked := p.checked
	p.mu.Unlock()
	if checked != nil {
		checked(resource)
	}
	return st
}

var errProbeTimeout = errors.New("probe timed out")

// probeErrorKind is the part of a probe error that names its kind (the text before the first
// ':'), so that a probe failing the same way with changing details warns once.
func probeErrorKind(msg string) string {
	kind, _, _ := strings.Cut(msg, ":")
	return kind
}

// ApplyFree sets the limit of resource from a probe's free count: min(declared, free + the units
// this scheduler's holders hold now). The licence server counts the licences this engine's
// holders have checked out as in use, so they are added back: free is what others (and nobody)
// leave. It returns the limit set. free < 0 counts as 0.
func (s *Scheduler) ApplyFree(resource string, declared, free int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := min(declared, max(free, 0)+s.inUse[resource])
	s.limits[resource] = limit
	s.dispatchLocked()
	return limit
}

// RunProbeCommand runs argv (no shell) with no standard input and returns its standard output
// (at most MaxProbeOutput bytes). An exit status other than 0 is an error quoting the end of its
// standard error. When ctx ends the process (and, on Unix, its process group) is killed, and it
// returns at most a second later even if a child it started keeps the output open.
func RunProbeCommand(ctx context.Context, argv []string) ([]byte, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("no command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	setProcessGroup(cmd)
	var stdout, stderr capped
	stdout.max, stderr.max = MaxProbeOutput+1, 4096
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if err != nil {
		tail := strings.TrimSpace(stderr.String())
		if len(tail) > 200 {
			tail = "…" + tail[len(tail)-200:]
		}
		if tail != "" {
			return nil, fmt.Errorf("%v (stderr: %s)", err, tail)
		}
		return nil, err
	}
	if stdout.Len() > MaxProbeOutput {
		return nil, fmt.Errorf("printed more than %d bytes", MaxProbeOutput)
	}
	return stdout.Bytes(), nil
}

// capped is a buffer that keeps the first max bytes written to it and drops the rest.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(b []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

// lmstatUsers matches the line FlexLM's `lmutil lmstat -f FEATURE` prints per feature:
// "Users of houdini:  (Total of 10 licenses issued;  Total of 7 licenses in use)".
var lmstatUsers = regexp.MustCompile(`(?m)^\s*Users of ([^:\s]+):\s*\((.*)\)\s*$`)

var lmstatTotals = regexp.MustCompile(`^Total of (\d+) licenses? issued;\s*Total of (\d+) licenses? in use$`)

// LmstatParser parses the output of `lmutil lmstat -f feature`: the free count is the licences
// issued minus those in use, summed over the "Users of feature:" lines (one per licence server
// or file); more in use than issued counts as 0 free. No such line, or one whose parenthesis is
// not the two totals (an "Error: …" or "Uncounted" line), is an error.
func LmstatParser(feature string) ProbeParser {
	return func(out []byte) (int, error) {
		found, free := false, 0
		for _, m := range lmstatUsers.FindAllSubmatch(out, -1) {
			if string(m[1]) != feature {
				continue
			}
			found = true
			inner := strings.Join(strings.Fields(string(m[2])), " ")
			t := lmstatTotals.FindStringSubmatch(inner)
			if t == nil {
				return 0, fmt.Errorf("the line for %s says %q, not its totals issued and in use", feature, quoteShort(inner))
			}
			issued, err1 := strconv.Atoi(t[1])
			used, err2 := strconv.Atoi(t[2])
			if err1 != nil || err2 != nil || issued > MaxProbeFree {
				return 0, fmt.Errorf("the totals of %s are out of range: %q", feature, quoteShort(inner))
			}
			free += max(issued-used, 0)
		}
		if !found {
			return 0, fmt.Errorf("no line \"Users of %s: (Total of N licenses issued; Total of M licenses in use)\" in %d bytes; check the feature name (lmstat -f FEATURE)", feature, len(out))
		}
		return min(free, MaxProbeFree), nil
	}
}

// RegexParser parses the first match of re (which has one capture group) in the output: the
// group is the free count, a whole number 0 to MaxProbeFree. No match is an error.
func RegexParser(re *regexp.Regexp) ProbeParser {
	return func(out []byte) (int, error) {
		m := re.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("the regex %s matches nothing in %d bytes", re, len(out))
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(m[1])))
		if err != nil || n < 0 || n > MaxProbeFree {
			return 0, fmt.Errorf("the regex's group is %q, not a whole number 0 to %d", quoteShort(string(m[1])), MaxProbeFree)
		}
		return n, nil
	}
}

func quoteShort(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// SetChecked sets a function called after each Check has applied its result (for tests of the
// engine that wait for a probe run); nil removes it. Call it before Start, or race-free from the
// function itself.
func (p *Prober) SetChecked(fn func(resource string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked = fn
}

// CheckPending runs, once, the probes that have not finished a run (an engine that starts no
// services, a read-only one, lists their state so); each bounded by its timeout.
func (p *Prober) CheckPending(ctx context.Context) {
	for _, sp := range p.specs {
		if st, _ := p.Status(sp.Resource); st.State == ProbePending {
			p.Check(ctx, sp.Resource)
		}
	}
}
