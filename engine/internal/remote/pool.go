package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Pool holds one MCP client per configured remote. A remote is connected on its first call
// (child started or URL reached, then the initialize handshake), and that connection serves
// every later call, concurrently, until it breaks; the call that finds it broken fails with
// kind "transient" and the next call connects again. A stdio child that exits between calls
// is noticed, and the next call reconnects without failing. A Pool is safe for concurrent use.
type Pool struct {
	configs map[string]Config
	names   []string        // sorted
	environ func() []string // the environment tokens and stdio children come from (WithEnviron)
	// maxMessage bounds each message a remote sends (maxMessageBytes when the pool was made).
	maxMessage int64

	// units takes the Resources of a pool's worker before it starts (WithUnits); nil: none
	// are taken.
	units UnitsFunc

	life context.Context // ends when the pool is closed
	stop context.CancelFunc
	jobs tracker // dials and connection closes

	mu      sync.Mutex
	closed  bool
	remotes map[string]*remote
}

// remote is the connection state of one configured server.
type remote struct {
	name string
	cfg  Config
	pool *Pool

	mu      sync.Mutex
	conn    *conn // nil until connected, and after it broke
	dialing *dial // the connection being made, if any

	workers *workerPool // non-nil when cfg.pooled(): the other fields are unused
}

// dial is one connection attempt that callers wait for together.
type dial struct {
	done   chan struct{}
	conn   *conn
	err    error
	status int // last HTTP error status seen while connecting
}

// Option configures a Pool.
type Option func(*Pool)

// UnitsFunc takes amounts (Config.Resources) for worker id of pool remote, waiting until they
// are free or ctx ends (then it returns ctx's error), and returns the function that gives them
// back (called once, when the worker's process has stopped).
type UnitsFunc func(ctx context.Context, remote string, worker int, amounts map[string]int) (release func(), err error)

// WithUnits makes the workers of pools with Resources take them through fn before they start
// and give them back once stopped. Without it, Resources are not taken.
func WithUnits(fn UnitsFunc) Option {
	return func(p *Pool) { p.units = fn }
}

// WithEnviron makes the pool read the environment from fn ("KEY=value" strings, as os.Environ
// returns them) instead of os.Environ: the bearer token a TokenEnv names, and the environment a
// stdio child starts with. Go's os.Environ is a copy taken when the process started; a host
// that changes its environment later (a Python script in a DCC) passes a live reader.
func WithEnviron(fn func() []string) Option {
	return func(p *Pool) {
		if fn != nil {
			p.environ = fn
		}
	}
}

// NewPool validates every config and returns a pool for them, keyed by remote name (the `dcc`
// of `tool_remote` steps). It connects to nothing yet. Invalid configs give a *run.Error
// with code invalid_input naming every problem, each as `remote "NAME": field: problem`.
func NewPool(configs map[string]Config, opts ...Option) (*Pool, error) {
	names := make([]string, 0, len(configs))
	for name := range configs {
		names = append(names, name)
	}
	slices.Sort(names)
	var problems []string
	for _, name := range names {
		if strings.TrimSpace(name) == "" {
			problems = append(problems, "remote name must not be empty")
			continue
		}
		if err := configs[name].Validate(); err != nil {
			for line := range strings.SplitSeq(err.Error(), "\n") {
				problems = append(problems, fmt.Sprintf("remote %q: %s", name, line))
			}
		}
	}
	if len(problems) > 0 {
		return nil, &run.Error{
			Code:    run.CodeInvalidInput,
			Message: strings.Join(problems, "; "),
			Details: map[string]any{"problems": problems},
		}
	}
	life, stop := context.WithCancel(context.Background())
	p := &Pool{configs: map[string]Config{}, names: names, environ: os.Environ, maxMessage: maxMessageBytes,
		life: life, stop: stop, remotes: map[string]*remote{}}
	for _, o := range opts {
		o(p)
	}
	for _, name := range names {
		cfg := configs[name]
		cfg.Command, cfg.URLs = slices.Clone(cfg.Command), slices.Clone(cfg.URLs)
		p.configs[name] = cfg
		r := &remote{name: name, cfg: cfg, pool: p}
		if cfg.pooled() {
			r.workers = newWorkerPool(r)
		}
		p.remotes[name] = r
	}
	return p, nil
}

// Names returns the configured remote names, sorted.
func (p *Pool) Names() []string { return slices.Clone(p.names) }

// Call calls tool on the remote named dcc with args (nil is sent as {}). The call ends when
// the tool answers, when ctx ends, or when the remote's Config.Timeout passes; when it ends
// early the remote is sent notifications/cancelled for the request and Call returns at once
// with kind "cancelled" or "timeout".
//
// Every failure of the call itself is in the Result (IsError, Kind, Message); the error is
// only for misuse: a *run.Error with code not_found for an unknown remote (naming the known
// ones), invalid_input for an empty tool name, closed after Close.
func (p *Pool) Call(ctx context.Context, dcc, tool string, args map[string]any) (Result, error) {
	p.mu.Lock()
	r, ok := p.remotes[dcc]
	closed := p.closed
	p.mu.Unlock()
	switch {
	case !ok:
		known := "no remotes are configured"
		if len(p.names) > 0 {
			known = "known remotes: " + strings.Join(p.names, ", ")
		}
		return Result{}, &run.Error{
			Code:    run.CodeNotFound,
			Message: fmt.Sprintf("unknown remote %q (%s)", dcc, known),
			Details: map[string]any{"remote": dcc, "known": p.Names()},
		}
	case closed:
		return Result{}, run.Errorf(run.CodeClosed, "calling remote %q: the remote pool is closed", dcc)
	case tool == "":
		return Result{}, run.Errorf(run.CodeInvalidInput, "calling remote %q: the tool name is empty", dcc)
	}
	if args == nil {
		args = map[string]any{}
	}

	if r.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.cfg.Timeout, errCallTimeout)
		defer cancel()
	}
	ctx, box := withStatusBox(ctx)
	req := mcp.CallToolRequest{Params: mcp.CallToolParams{Name: tool, Arguments: args}}
	defer watchReports(ctx, &req)()
	withTraceparent(ctx, &req)
	if r.workers != nil {
		return r.workers.call(ctx, tool, req), nil
	}

	for attempt := 1; ; attempt++ {
		c, d, err := r.get(ctx)
		if err != nil {
			status := 0
			if d != nil {
				status = d.status
			}
			return r.failed(ctx, tool, classify(ctx, err, status), err.Error()), nil
		}
		res, err := c.client.CallTool(ctx, req)
		if err == nil {
			return resultFromTool(res), nil
		}
		if killed := c.tooLarge.Load(); killed || box.overLimit() {
			what := "the remote sent a message over " + sizeText(p.maxMessage)
			if killed {
				r.drop(c)
				what = "the remote process wrote a message over " + sizeText(p.maxMessage) + " and was killed"
			}
			return r.failed(ctx, tool, failure{kind: run.KindTooLarge}, what+
				" (the limit on one message from a remote): return a file path instead of the data"), nil
		}
		f := classify(ctx, err, box.get())
		if f.kind == run.KindError && box.gotResult() {
			return r.failed(ctx, tool, failure{kind: run.KindInvalidOutput}, malformedResult(err)), nil
		}
		if f.broken && p.isClosed() && ctx.Err() == nil {
			f = failure{kind: run.KindCancelled}
			err = errPoolClosed
		}
		msg := err.Error()
		if f.broken {
			msg = c.describe(err)
			r.drop(c)
		}
		if f.unsent && attempt == 1 {
			box.code.Store(0)
			continue // the server refused the session without running the call: reconnect
		}
		return r.failed(ctx, tool, f, msg), nil
	}
}

// failed builds the Result of a call that failed with f.
func (r *remote) failed(ctx context.Context, tool string, f failure, detail string) Result {
	var msg string
	switch f.kind {
	case run.KindTimeout:
		if r.cfg.Timeout > 0 && context.Cause(ctx) == errCallTimeout {
			msg = fmt.Sprintf("remote %q tool %q: no answer within the remote's timeout of %v", r.name, tool, r.cfg.Timeout)
		} else {
			msg = fmt.Sprintf("remote %q tool %q: deadline exceeded", r.name, tool)
		}
	case run.KindCancelled:
		if ctx.Err() != nil {
			msg = fmt.Sprintf("remote %q tool %q: cancelled (%v)", r.name, tool, context.Cause(ctx))
		} else {
			msg = fmt.Sprintf("remote %q tool %q: %v", r.name, tool, errPoolClosed)
		}
	default:
		msg = fmt.Sprintf("remote %q tool %q: %s", r.name, tool, detail)
	}
	return Result{IsError: true, Kind: f.kind, Message: msg}
}

// get returns the remote's live connection, connecting when there is none. Callers that
// arrive while a connection is being made wait for that one. The dial goes on in the
// background, bounded by connectTimeout, when ctx ends first, so that the next call can use
// it. On failure the dial, if any, tells the HTTP status seen.
func (r *remote) get(ctx context.Context) (*conn, *dial, error) {
	r.mu.Lock()
	if r.pool.isClosed() {
		r.mu.Unlock()
		return nil, nil, errPoolClosed
	}
	if c := r.conn; c != nil {
		if !c.dead() {
			r.mu.Unlock()
			return c, nil, nil
		}
		r.dropLocked(c)
	}
	d := r.dialing
	if d == nil {
		d = &dial{done: make(chan struct{})}
		if !r.pool.jobs.goTrack(func() { r.dial(d) }) {
			r.mu.Unlock()
			return nil, nil, errPoolClosed
		}
		r.dialing = d
	}
	r.mu.Unlock()

	select {
	case <-d.done:
		if d.err != nil {
			return nil, d, d.err
		}
		return d.conn, d, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// dial makes a connection for r and publishes it to the waiters.
func (r *remote) dial(d *dial) {
	ctx, cancel := context.WithTimeout(r.pool.life, connectTimeout)
	ctx, box := withStatusBox(ctx)
	c, err := connect(r.pool.life, ctx, r.cfg, r.pool.environ, connectTimeout, r.pool.maxMessage)
	cancel()

	r.mu.Lock()
	r.dialing = nil
	closed := r.pool.isClosed()
	if err == nil && !closed {
		r.conn = c
	}
	r.mu.Unlock()
	if err == nil && closed {
		c.close()
		c, err = nil, errPoolClosed
	}
	d.conn, d.err, d.status = c, err, box.get()
	close(d.done)
}

// drop forgets c, if it is still r's connection, and closes it in the background.
func (r *remote) drop(c *conn) {
	c.broken.Store(true)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(c)
}

// dropLocked is drop with r.mu held. Once the pool is closed, Close owns the connection.
func (r *remote) dropLocked(c *conn) {
	if r.conn != c {
		return
	}
	if r.pool.jobs.goTrack(c.close) {
		r.conn = nil
	}
}

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close closes every connection and waits until it is closed: a stdio child gets 2 s to exit
// after its stdin is closed, then is killed; an HTTP session is ended with a DELETE (at most
// 5 s). Calls in flight end with kind "cancelled"; later calls get a *run.Error with code
// closed. Close is safe to call more than once.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()

	var conns []*conn
	for _, name := range p.names {
		r := p.remotes[name]
		r.mu.Lock()
		if r.conn != nil {
			conns = append(conns, r.conn)
			r.conn = nil
		}
		r.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(c.close)
	}
	for _, name := range p.names {
		if wp := p.remotes[name].workers; wp != nil {
			wg.Go(wp.close)
		}
	}
	p.stop() // ends dials in progress
	wg.Wait()
	p.jobs.closeAndWait()
}

// Pools describes the workers of every pooled remote (Config.pooled), by name. Remotes that
// are not pools are left out.
func (p *Pool) Pools() []PoolInfo {
	var out []PoolInfo
	for _, name := range p.names {
		if wp := p.remotes[name].workers; wp != nil {
			out = append(out, wp.info())
		}
	}
	return out
}

// Queued returns, by name of each pooled remote, the calls waiting for one of its workers (all
// busy, or the ones to serve them still starting); remotes that are not pools are left out. It
// reads no process state, so a metrics scrape may call it freely.
func (p *Pool) Queued() map[string]int {
	out := map[string]int{}
	for _, name := range p.names {
		if wp := p.remotes[name].workers; wp != nil {
			wp.mu.Lock()
			out[name] = len(wp.waiting)
			wp.mu.Unlock()
		}
	}
	return out
}

// Warm starts every worker of every pooled remote (up to its Workers) and waits until each
// answered initialize or failed to start, or ctx ends; the workers then stay idle (until
// IdleStop). The error joins the start failures, each naming its remote.
func (p *Pool) Warm(ctx context.Context) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, name := range p.names {
		wp := p.remotes[name].workers
		if wp == nil {
			continue
		}
		wg.Go(func() {
			if err := wp.warm(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("remote %q: %w", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
