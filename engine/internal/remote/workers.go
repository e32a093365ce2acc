package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Worker states, as WorkerInfo.State reports them.
const (
	WorkerStarting = "starting" // spawned, initialize not answered yet
	WorkerIdle     = "idle"     // waiting for a call
	WorkerBusy     = "busy"     // serving a call
	WorkerDraining = "draining" // its call was cancelled; waiting up to KillAfter for it to finish
)

// WorkerInfo describes one worker process of a pool.
type WorkerInfo struct {
	ID        int       // 1, 2, … in start order, never reused within a pool
	PID       int       // 0 while starting, and for a server
	URL       string    // the member of a pool of servers (Config.URLs); "" for a process
	State     string    // WorkerStarting, WorkerIdle, WorkerBusy or WorkerDraining
	Calls     int       // calls served
	RSSBytes  int64     // resident set size; -1 when unknown (not Linux, or not readable)
	StartedAt time.Time // when it was spawned
}

// PoolInfo describes the workers of one pooled remote.
type PoolInfo struct {
	Name    string
	Command []string     // a pool of processes'
	URLs    []string     // a pool of servers'; Max is len(URLs) × WorkersPerURL
	Max     int          // Config.Workers
	Workers []WorkerInfo // by ID
	Started int          // workers ever started
	Lost    int          // workers that exited or crashed during a call, or were killed
}

// workerPool runs up to cfg.Workers children of a command remote, each serving one call at a
// time. Calls wait in one FIFO queue when every worker is busy.
type workerPool struct {
	r *remote

	mu      sync.Mutex
	workers []*worker // starting, idle, busy or draining
	waiting []*waiter // FIFO
	nextID  int
	lost    int
	// A pool of servers: when each member last failed (could not be reached, or dropped a
	// call), until a call succeeds on it; and where the search for a member to start starts.
	failed  map[string]time.Time
	nextURL int
}

// worker is one child of a pool.
type worker struct {
	id      int
	url     string // the member of a pool of servers; "" for a process
	conn    *conn  // nil while starting
	state   string
	calls   int
	started time.Time
	idle    *time.Timer // stops the worker after IdleStop; nil when not idle or no IdleStop
	// units gives back the Resources the worker holds (Config.Resources); nil when none.
	units func()
	once  sync.Once
	// unitsCancel ends the wait for its units (non-nil while it waits; wp.mu); surplus says it
	// was ended because no waiter needs the worker any more (an idle worker served them).
	unitsCancel context.CancelFunc
	surplus     bool
}

// stop closes w's connection (its process stopped, killed past its grace) and then gives back
// the units it held; safe to call more than once.
func (w *worker) stop() {
	w.once.Do(func() {
		if w.conn != nil {
			w.conn.close()
		}
		if w.units != nil {
			w.units()
		}
	})
}

// waiter is a call waiting for a worker; grant receives exactly one grant once the waiter is
// out of the queue.
type waiter struct{ grant chan grant }

type grant struct {
	w   *worker
	err error // the start failure given to this waiter
}

func newWorkerPool(r *remote) *workerPool { return &workerPool{r: r, failed: map[string]time.Time{}} }

// ref names w in results.
func (wp *workerPool) ref(w *worker, pid int) *WorkerRef {
	return &WorkerRef{Pool: wp.r.name, PID: pid, URL: DisplayURL(w.url)}
}

// pickURLLocked chooses the member of a pool of servers a new worker connects to, or "" for
// none. Members that failed within MemberRetryAfter are avoided while another member is
// healthy — even a full one: the call then waits for one of its workers — and tried again,
// the least recently failed first, when every member failed. Among the members chosen from, one
// with room (fewer than WorkersPerURL workers) and the least loaded is taken, the next in turn
// on a tie.
func (wp *workerPool) pickURLLocked() string {
	urls := wp.r.cfg.URLs
	load := map[string]int{}
	for _, w := range wp.workers {
		load[w.url]++
	}
	now := time.Now()
	recent := func(u string) bool {
		t, ok := wp.failed[u]
		return ok && now.Sub(t) < MemberRetryAfter
	}
	anyHealthy := false
	for _, u := range urls {
		anyHealthy = anyHealthy || !recent(u)
	}
	best := -1
	for k := range urls {
		i := (wp.nextURL + k) % len(urls)
		u := urls[i]
		if load[u] >= wp.r.cfg.perURL() || anyHealthy && recent(u) {
			continue
		}
		switch {
		case best < 0:
			best = i
		case anyHealthy && load[u] < load[urls[best]]:
			best = i
		case !anyHealthy && wp.failed[u].Before(wp.failed[urls[best]]):
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	wp.nextURL = (best + 1) % len(urls)
	return urls[best]
}

// memberFailed records that the member u of a pool of servers failed now ("" is no member).
func (wp *workerPool) memberFailed(u string) {
	if u == "" {
		return
	}
	wp.mu.Lock()
	wp.failed[u] = time.Now()
	wp.mu.Unlock()
}

// pid is the worker's process id, 0 while it starts.
func (w *worker) pid() int {
	if w.conn == nil || w.conn.proc == nil || w.conn.proc.cmd.Process == nil {
		return 0
	}
	return w.conn.proc.cmd.Process.Pid
}

// acquire returns an idle worker marked busy, starting one when the pool has room. Callers are
// served in arrival order. A start failure fails the oldest waiter with that error.
func (wp *workerPool) acquire(ctx context.Context) (*worker, error) {
	wt := &waiter{grant: make(chan grant, 1)}
	wp.mu.Lock()
	if wp.r.pool.isClosed() {
		wp.mu.Unlock()
		return nil, errPoolClosed
	}
	wp.waiting = append(wp.waiting, wt)
	wp.dispatchLocked()
	wp.mu.Unlock()

	select {
	case g := <-wt.grant:
		return g.w, g.err
	case <-ctx.Done():
	}
	wp.mu.Lock()
	for i, x := range wp.waiting {
		if x == wt {
			wp.waiting = append(wp.waiting[:i], wp.waiting[i+1:]...)
			wp.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	wp.mu.Unlock()
	// Granted while ctx ended: give the worker back.
	if g := <-wt.grant; g.w != nil {
		wp.release(g.w)
	}
	return nil, ctx.Err()
}

// dispatchLocked hands idle workers to the oldest waiters, then starts workers while there are
// more waiters than starting workers and the pool has room.
func (wp *workerPool) dispatchLocked() {
	for _, w := range wp.workers {
		if len(wp.waiting) == 0 {
			break
		}
		if w.state != WorkerIdle {
			continue
		}
		if w.conn.dead() { // exited while idle: forget it (closing its pipes and output files), a new one starts below
			wp.removeLocked(w)
			if !wp.r.pool.jobs.goTrack(w.stop) {
				go w.stop()
			}
			wp.dispatchLocked()
			return
		}
		wt := wp.waiting[0]
		wp.waiting = wp.waiting[1:]
		wp.busyLocked(w)
		wt.grant <- grant{w: w}
	}
	starting := 0
	for _, w := range wp.workers {
		if w.state == WorkerStarting && !w.surplus {
			starting++
		}
	}
	defer wp.dropSurplusLocked(&starting)
	for len(wp.waiting) > starting && len(wp.workers) < wp.r.cfg.workers() {
		w := &worker{state: WorkerStarting, started: time.Now()}
		if len(wp.r.cfg.URLs) > 0 {
			if w.url = wp.pickURLLocked(); w.url == "" {
				return // the healthy members are full: the waiters wait for their workers
			}
		}
		wp.nextID++
		w.id = wp.nextID
		if !wp.r.pool.jobs.goTrack(func() { wp.start(w) }) {
			return // closing
		}
		wp.workers = append(wp.workers, w)
		starting++
	}
}

// dropSurplusLocked ends the waits for their units of the newest starting workers that no
// waiter needs any more (*starting of them start for len(wp.waiting) waiters): a worker of a
// pool with Resources must not take a licence, and hold it while idle, for a call an idle worker
// already served.
func (wp *workerPool) dropSurplusLocked(starting *int) {
	for i := len(wp.workers) - 1; i >= 0 && *starting > len(wp.waiting); i-- {
		if w := wp.workers[i]; w.state == WorkerStarting && w.unitsCancel != nil && !w.surplus {
			w.surplus = true
			w.unitsCancel()
			*starting--
		}
	}
}

func (wp *workerPool) busyLocked(w *worker) {
	w.state = WorkerBusy
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
}

// start spawns w and publishes it: to the oldest waiter, else as idle. A failure is given to
// the oldest waiter, and w is forgotten.
func (wp *workerPool) start(w *worker) {
	cfg := wp.r.cfg
	var err error
	if units := wp.r.pool.units; units != nil && len(cfg.Resources) > 0 {
		// The units first, for as long as they take (the pool's life, or until no waiter needs
		// this worker: dropSurplusLocked): it counts as starting meanwhile, so no other starts
		// for the same waiter.
		uctx, ucancel := context.WithCancel(wp.r.pool.life)
		wp.mu.Lock()
		w.unitsCancel = ucancel
		wp.mu.Unlock()
		w.units, err = units(uctx, wp.r.name, w.id, cfg.Resources)
		ucancel()
		wp.mu.Lock()
		w.unitsCancel = nil
		surplus := w.surplus
		if err != nil && surplus && wp.r.pool.life.Err() == nil {
			// Not needed any more: gone quietly, no waiter is told of a failure.
			wp.removeLocked(w)
			wp.dispatchLocked()
			wp.mu.Unlock()
			return
		}
		w.surplus = false // got them: it starts, and serves the next waiter or idles
		wp.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("taking its resources: %w", err)
		}
	}
	var c *conn
	if err == nil {
		ctx, cancel := context.WithTimeout(wp.r.pool.life, cfg.startTimeout())
		if w.url != "" {
			member := cfg
			member.URL, member.URLs = w.url, nil
			cfg = member
		}
		c, err = connect(wp.r.pool.life, ctx, cfg, wp.r.pool.environ, cfg.startTimeout(), wp.r.pool.maxMessage)
		cancel()
	}
	if err != nil && w.units != nil {
		w.units() // the process did not start: nothing holds them
		w.units = nil
	}
	if err != nil {
		if w.url != "" {
			err = &memberError{url: w.url, err: err}
		} else {
			err = fmt.Errorf("starting worker %s: %w", commandLine(cfg.Command), err)
		}
	}

	wp.mu.Lock()
	defer wp.mu.Unlock()
	if err == nil && wp.r.pool.isClosed() {
		w.conn = c
		if !wp.r.pool.jobs.goTrack(w.stop) {
			go w.stop() // gives back its units too
		}
		err = errPoolClosed
	}
	if err != nil {
		if w.url != "" {
			wp.failed[w.url] = time.Now()
		}
		wp.removeLocked(w)
		if len(wp.waiting) > 0 {
			wt := wp.waiting[0]
			wp.waiting = wp.waiting[1:]
			wt.grant <- grant{err: err}
		}
		if !wp.r.pool.isClosed() {
			wp.dispatchLocked()
		}
		return
	}
	w.conn = c
	wp.idleLocked(w)
}

// idleLocked makes w available: to the oldest waiter, else idle (with its idle timer).
func (wp *workerPool) idleLocked(w *worker) {
	w.state = WorkerIdle
	if len(wp.waiting) > 0 {
		wp.dispatchLocked()
		return
	}
	if d := wp.r.cfg.IdleStop; d > 0 {
		var timer *time.Timer
		timer = time.AfterFunc(d, func() {
			wp.mu.Lock()
			defer wp.mu.Unlock()
			// A timer that fired while the worker was taken and made idle again is stale.
			if w.state == WorkerIdle && w.idle == timer {
				wp.retireLocked(w)
			}
		})
		w.idle = timer
	}
}

// removeLocked forgets w (it is stopped by whoever removes it).
func (wp *workerPool) removeLocked(w *worker) {
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	for i, x := range wp.workers {
		if x == w {
			wp.workers = append(wp.workers[:i], wp.workers[i+1:]...)
			return
		}
	}
}

// retireLocked forgets w and stops it in the background (stdin closed, killed after
// closeGrace), then lets a waiter start a new one.
func (wp *workerPool) retireLocked(w *worker) {
	wp.removeLocked(w)
	if w.conn != nil {
		if !wp.r.pool.jobs.goTrack(w.stop) {
			go w.stop() // the pool is closing: Close waits for the workers it still lists only
		}
	}
	wp.dispatchLocked()
}

// release takes back w after a call that ended normally: it is recycled when it served
// RecycleAfterCalls calls or its RSS passed MaxRSSMB, dropped when its connection broke, else
// made idle.
func (wp *workerPool) release(w *worker) {
	cfg := wp.r.cfg
	recycle := w.conn.dead() || (cfg.RecycleAfterCalls > 0 && w.calls >= cfg.RecycleAfterCalls)
	if !recycle && cfg.MaxRSSMB > 0 {
		if rss := rssBytes(w.pid()); rss > int64(cfg.MaxRSSMB)<<20 {
			recycle = true
		}
	}
	wp.mu.Lock()
	defer wp.mu.Unlock()
	if recycle || wp.r.pool.isClosed() {
		wp.retireLocked(w)
		return
	}
	wp.idleLocked(w)
}

// lose forgets a worker that died or must be killed during a call, and kills it.
func (wp *workerPool) lose(w *worker) {
	wp.mu.Lock()
	wp.lost++
	wp.removeLocked(w)
	wp.mu.Unlock()
	if w.conn.proc != nil {
		w.conn.proc.kill()
	}
	if !wp.r.pool.jobs.goTrack(w.stop) {
		w.stop()
	}
	wp.mu.Lock()
	if !wp.r.pool.isClosed() {
		wp.dispatchLocked()
	}
	wp.mu.Unlock()
}

// call runs one tools/call on a worker of the pool.
func (wp *workerPool) call(ctx context.Context, tool string, req mcp.CallToolRequest) Result {
	r := wp.r
	w, err := wp.acquire(ctx)
	if err != nil {
		f := classify(ctx, err, 0)
		var me *memberError
		switch {
		case ctx.Err() != nil || errors.Is(err, errPoolClosed):
		case errors.As(err, &me) && f.kind != run.KindPermission && f.kind != run.KindFatal:
			// Another member takes the retry (MemberRetryAfter).
			f.kind = run.KindWorkerLost
		case f.kind == run.KindError:
			f.kind = run.KindTransient
		}
		out := r.failed(ctx, tool, f, err.Error())
		if me != nil && ctx.Err() == nil {
			out.Worker = &WorkerRef{Pool: r.name, URL: DisplayURL(me.url)}
		}
		return out
	}
	pid := w.pid()
	ref := wp.ref(w, pid)
	st := w.conn.settle
	res, err := w.conn.client.CallTool(ctx, req)
	wp.mu.Lock()
	w.calls++
	wp.mu.Unlock()
	switch {
	case err == nil:
		out := resultFromTool(res)
		out.Worker = ref
		if w.url != "" {
			wp.mu.Lock()
			delete(wp.failed, w.url)
			wp.mu.Unlock()
		}
		wp.release(w)
		return out
	case ctx.Err() != nil:
		// Cancelled or timed out: notifications/cancelled is on its way. The worker finishes
		// the call within KillAfter, or is killed; the caller does not wait. A server's session
		// is ended instead (its server cancels what still runs on it) and a new one is made
		// for the next call.
		wp.mu.Lock()
		if st == nil {
			wp.retireLocked(w)
		} else {
			w.state = WorkerDraining
		}
		wp.mu.Unlock()
		if st != nil && !r.pool.jobs.goTrack(func() { wp.drain(w, st) }) {
			wp.lose(w)
		}
		out := r.failed(ctx, tool, classify(ctx, err, 0), err.Error())
		out.Worker = ref
		return out
	}
	if out, ok := wp.overLimit(ctx, w, tool, ref, pid); ok {
		return out
	}
	f := classify(ctx, err, 0)
	if f.kind == run.KindError && boxOf(ctx).gotResult() {
		wp.release(w)
		out := r.failed(ctx, tool, failure{kind: run.KindInvalidOutput}, malformedResult(err))
		out.Worker = ref
		return out
	}
	if f.broken || w.conn.dead() {
		msg := w.conn.describe(err)
		var logs []run.LogLine
		if w.conn.proc != nil {
			logs = w.conn.proc.callOutput() // before lose removes the files
		}
		wp.memberFailed(w.url)
		wp.lose(w)
		out := Result{IsError: true, Kind: run.KindWorkerLost, Worker: ref, Logs: logs}
		if w.url != "" {
			out.Message = fmt.Sprintf("remote %q tool %q: server %s was lost during the call: %s", r.name, tool, DisplayURL(w.url), msg)
		} else {
			out.Message = fmt.Sprintf("remote %q tool %q: worker pid %d was lost during the call: %s%s", r.name, tool, pid, msg, lastLines(logs))
		}
		if r.pool.isClosed() {
			out.Kind, out.Message = run.KindCancelled, fmt.Sprintf("remote %q tool %q: %v", r.name, tool, errPoolClosed)
		}
		return out
	}
	wp.release(w)
	out := r.failed(ctx, tool, f, err.Error())
	out.Worker = ref
	return out
}

// overLimit is the outcome of a call during which w sent a message over the size limit, and
// whether there was one: a process worker was killed at once (frameReader), a server's session
// is ended; either is lost and replaced, and the call fails with kind too_large.
func (wp *workerPool) overLimit(ctx context.Context, w *worker, tool string, ref *WorkerRef, pid int) (Result, bool) {
	r := wp.r
	if !w.conn.tooLarge.Load() && !boxOf(ctx).overLimit() {
		return Result{}, false
	}
	wp.lose(w)
	limit := sizeText(r.pool.maxMessage)
	out := Result{IsError: true, Kind: run.KindTooLarge, Worker: ref}
	if w.url != "" {
		out.Message = fmt.Sprintf("remote %q tool %q: server %s sent a message over %s (the limit on one message from a remote); its session was ended: return a file path instead of the data", r.name, tool, DisplayURL(w.url), limit)
	} else {
		out.Message = fmt.Sprintf("remote %q tool %q: worker pid %d wrote a message over %s (the limit on one message from a worker) and was killed: return a file path instead of the data", r.name, tool, pid, limit)
	}
	return out, true
}

// malformedResult describes a tools/call result mcp-go could not read (err) for an
// invalid_output failure, without the Go type encoding/json names.
func malformedResult(err error) string {
	why, _, _ := strings.Cut(err.Error(), " into Go ")
	return fmt.Sprintf("the answer is not a valid MCP tool result (%s): it needs a \"content\" list of content blocks (docs/guide/pools.md)", why)
}

// memberError is a member of a pool of servers that could not be reached.
type memberError struct {
	url string
	err error
}

func (e *memberError) Error() string {
	return fmt.Sprintf("connecting to pool member %s: %s", DisplayURL(e.url), redactIn(e.err.Error(), e.url))
}

func (e *memberError) Unwrap() error { return e.err }

// lostLines is how many of a lost call's last output lines its failure message quotes (all of
// them are on the step record).
const lostLines = 10

// lastLines quotes the last lostLines lines of logs for a failure message, "" when there are none.
func lastLines(logs []run.LogLine) string {
	if len(logs) == 0 {
		return ""
	}
	// stdout's lines come before stderr's: quote the end of each, stderr's (the crash) last.
	var quoted []string
	for _, stream := range []string{run.StreamStdout, run.StreamStderr} {
		var mine []string
		for _, l := range logs {
			if l.Stream == stream {
				mine = append(mine, l.Text)
			}
		}
		quoted = append(quoted, mine[max(len(mine)-lostLines/2, 0):]...)
	}
	for i, q := range quoted {
		if len(q) > 200 {
			q = q[:200] + "…"
		}
		quoted[i] = strconv.Quote(q)
	}
	return fmt.Sprintf("; the call's last output lines (%d in all, on the step record): %s", len(logs), strings.Join(quoted, ", "))
}

// drain waits up to KillAfter for w's cancelled call to be answered, then makes it available
// again, or kills and replaces it.
func (wp *workerPool) drain(w *worker, st *settler) {
	timer := time.NewTimer(wp.r.cfg.killAfter())
	defer timer.Stop()
	select {
	case <-st.idle():
		if w.conn.tooLarge.Load() { // killed for a message over the limit
			wp.lose(w)
			return
		}
		wp.release(w)
	case <-timer.C:
		wp.lose(w)
	case <-wp.r.pool.life.Done():
		wp.lose(w)
	}
}

// close stops every worker and waits for them.
func (wp *workerPool) close() {
	wp.mu.Lock()
	ws := wp.workers
	wp.workers = nil
	for _, wt := range wp.waiting {
		wt.grant <- grant{err: errPoolClosed}
	}
	wp.waiting = nil
	wp.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		if w.idle != nil {
			w.idle.Stop()
		}
		if w.conn != nil {
			wg.Go(w.stop)
		}
	}
	wg.Wait()
}

// info describes the pool now.
func (wp *workerPool) info() PoolInfo {
	wp.mu.Lock()
	pi := PoolInfo{Name: wp.r.name, Command: slices.Clone(wp.r.cfg.Command), URLs: slices.Clone(wp.r.cfg.URLs),
		Max: wp.r.cfg.workers(), Started: wp.nextID, Lost: wp.lost}
	for _, w := range wp.workers {
		pi.Workers = append(pi.Workers, WorkerInfo{ID: w.id, PID: w.pid(), URL: DisplayURL(w.url), State: w.state, Calls: w.calls, StartedAt: w.started})
	}
	wp.mu.Unlock()
	for i := range pi.Workers {
		pi.Workers[i].RSSBytes = rssBytes(pi.Workers[i].PID)
	}
	return pi
}

// rssBytes is the resident set size of process pid from /proc/PID/status (VmRSS), or -1 when
// it cannot be read: pid 0, a process that is gone, or a system other than Linux.
func rssBytes(pid int) int64 {
	if pid <= 0 || runtime.GOOS != "linux" {
		return -1
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest) // "123456 kB"
			if len(fields) >= 1 {
				if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return -1
}

// commandLine renders a command for messages, quoting arguments with spaces.
func commandLine(cmd []string) string {
	parts := make([]string, len(cmd))
	for i, a := range cmd {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	return "`" + strings.Join(parts, " ") + "`"
}

// warm starts every worker the pool may run and waits until each answered initialize: a check
// that the command line works (and that as many licences are free). It returns the start
// failures, joined.
func (wp *workerPool) warm(ctx context.Context) error {
	n := wp.r.cfg.workers()
	got := make(chan *worker, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			w, err := wp.acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			got <- w
		}()
	}
	var held []*worker
	var failures []error
	for range n {
		select {
		case w := <-got:
			held = append(held, w)
		case err := <-errs:
			failures = append(failures, err)
		}
	}
	for _, w := range held {
		wp.release(w)
	}
	return distinctFailures(failures, n)
}

// distinctFailures joins the start failures of a pool of n workers, each different message
// once, with how many workers it stopped when more than one: a command that cannot start fails
// every worker the same way ("… executable file not found in $PATH (4 of 4 workers)"). nil
// when there are none.
func distinctFailures(failures []error, n int) error {
	var order []string
	first := map[string]error{}
	count := map[string]int{}
	for _, err := range failures {
		msg := err.Error()
		if count[msg] == 0 {
			order = append(order, msg)
			first[msg] = err
		}
		count[msg]++
	}
	out := make([]error, 0, len(order))
	for _, msg := range order {
		if c := count[msg]; c > 1 {
			out = append(out, fmt.Errorf("%w (%d of %d workers)", first[msg], c, n))
		} else {
			out = append(out, first[msg])
		}
	}
	return errors.Join(out...)
}
