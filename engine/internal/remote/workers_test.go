package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// pooled is a bundle whose remote "srv" is a pool of tests/mcpserver workers.
func pooled(t *testing.T, mod func(*Config)) *bundle {
	t.Helper()
	return setup(t, "stdio", func(c *Config) {
		c.Workers = 4
		if mod != nil {
			mod(c)
		}
	})
}

// cancelWhenBusy returns a context cancelled 300 ms after a worker of the bundle's one pool was
// handed a call (30 s at most): a fixed delay from the call's start cancelled it before any
// worker held it when starting the worker took longer (under Wine, seen in CI); and a cancel
// right at the hand-over can reach the worker before its handler has the request, which then
// ignored it (2 in 20 under -race with a busy loop) until the pool sent it again a second
// later (remindCancel): the 300 ms let the handler start, so the test needs no reminder.
func (b *bundle) cancelWhenBusy(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		defer cancel()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if p := b.pool.Pools(); len(p) == 1 {
				for _, w := range p[0].Workers {
					if w.State == WorkerBusy {
						time.Sleep(300 * time.Millisecond)
						return
					}
				}
			}
		}
	}()
	return ctx
}

func pidOf(t *testing.T, res Result) int {
	t.Helper()
	if res.IsError {
		t.Fatalf("call failed: %s: %s", res.Kind, res.Message)
	}
	out, _ := res.Output.(map[string]any)
	n, err := out["pid"].(json.Number).Int64()
	if err != nil {
		t.Fatalf("no pid in %#v", res.Output)
	}
	if res.Worker == nil || res.Worker.PID != int(n) || res.Worker.Pool != "srv" {
		t.Fatalf("Result.Worker = %v, want srv/%d", res.Worker, n)
	}
	return int(n)
}

// Calls run one per worker: 8 sleeps of 300 ms on 4 workers overlap on 4 processes.
func TestWorkerPoolParallel(t *testing.T) {
	b := pooled(t, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	workers := map[int]int{}
	start := time.Now()
	for i := range 8 {
		wg.Go(func() {
			res := b.call(t, nil, "sleep", map[string]any{"ms": 300, "key": string(rune('a' + i))})
			if res.IsError || res.Worker == nil {
				t.Errorf("sleep: %+v", res)
				return
			}
			mu.Lock()
			workers[res.Worker.PID]++
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(workers) != 4 {
		t.Fatalf("calls ran on %d workers (%v), want 4", len(workers), workers)
	}
	for pid, n := range workers {
		if n != 2 {
			t.Errorf("worker %d served %d calls, want 2 (one call at a time per worker)", pid, n)
		}
	}
	if elapsed > 2400*time.Millisecond { // serial would be 2.4 s
		t.Errorf("8 × 300 ms on 4 workers took %v", elapsed)
	}
	info := b.pool.Pools()
	if len(info) != 1 || info[0].Max != 4 || len(info[0].Workers) != 4 {
		t.Fatalf("Pools() = %+v", info)
	}
	for _, w := range info[0].Workers {
		if w.State != WorkerIdle || w.Calls != 2 || w.PID == 0 || (runtime.GOOS == "linux") != (w.RSSBytes > 0) {
			t.Errorf("worker %+v: want idle, 2 calls, a pid and an RSS (Linux only)", w)
		}
	}
}

// A worker that exits during a call fails it with worker_lost and is replaced.
func TestWorkerLost(t *testing.T) {
	b := pooled(t, func(c *Config) { c.Workers = 1 })
	first := pidOf(t, b.call(t, nil, "count", nil))
	res := b.call(t, nil, "crash", map[string]any{"code": 7})
	if !res.IsError || res.Kind != run.KindWorkerLost {
		t.Fatalf("crash: %+v, want kind worker_lost", res)
	}
	if !strings.Contains(res.Message, "crash requested") || !strings.Contains(res.Message, "exit status 7") {
		t.Errorf("message %q lacks the exit status and stderr tail", res.Message)
	}
	if res.Worker == nil || res.Worker.PID != first {
		t.Errorf("Worker = %v, want pid %d", res.Worker, first)
	}
	if second := pidOf(t, b.call(t, nil, "count", nil)); second == first {
		t.Fatalf("the next call ran on the lost worker's pid %d", first)
	}
	if info := b.pool.Pools()[0]; info.Lost != 1 || info.Started != 2 {
		t.Errorf("Pools() = %+v, want 1 lost of 2 started", info)
	}
}

// A worker is replaced after RecycleAfterCalls calls, between calls.
func TestWorkerRecycleAfterCalls(t *testing.T) {
	b := pooled(t, func(c *Config) { c.Workers, c.RecycleAfterCalls = 1, 2 })
	var pids []int
	for range 5 {
		pids = append(pids, pidOf(t, b.call(t, nil, "count", nil)))
	}
	if pids[0] != pids[1] || pids[1] == pids[2] || pids[2] != pids[3] || pids[3] == pids[4] {
		t.Fatalf("pids %v: want a new worker every 2 calls", pids)
	}
}

// A worker whose RSS passes MaxRSSMB is replaced after its call (every Go server is > 1 MiB).
func TestWorkerRecycleOnRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("max_rss_mb is read from /proc on Linux only (docs/guide/pools.md)")
	}
	b := pooled(t, func(c *Config) { c.Workers, c.MaxRSSMB = 1, 1 })
	a := pidOf(t, b.call(t, nil, "count", nil))
	if c := pidOf(t, b.call(t, nil, "count", nil)); c == a {
		t.Fatalf("the worker (pid %d) over max_rss_mb was not recycled", a)
	}
}

// Cancelling a call returns at once; the worker gets notifications/cancelled, finishes, and
// serves the next call.
func TestWorkerCancelCooperative(t *testing.T) {
	b := pooled(t, func(c *Config) { c.Workers = 1 })
	ctx := b.cancelWhenBusy(t)
	res := b.call(t, ctx, "sleep", map[string]any{"ms": 20000, "key": "k"})
	if res.Kind != run.KindCancelled || res.Worker == nil {
		t.Fatalf("cancelled sleep: %+v", res)
	}
	if got := pidOf(t, b.call(t, nil, "count", nil)); got != res.Worker.PID {
		t.Fatalf("after a cooperative cancel the call ran on pid %d, want the same worker %d", got, res.Worker.PID)
	}
}

// A worker that does not finish a cancelled call within KillAfter is killed and replaced.
func TestWorkerCancelKilled(t *testing.T) {
	needPOSIXTools(t)
	b := setup(t, "stdio", func(c *Config) {
		c.Command = []string{"python3", "-c", stubbornWorker}
		c.Workers, c.KillAfter = 1, 300*time.Millisecond
	})
	// The worker starts first: on a loaded machine under -race, starting python3 can take
	// longer than the call's 300 ms, which then times out before any worker holds it.
	if err := b.pool.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	res := b.call(t, ctx, "hang", nil)
	if res.Kind != run.KindTimeout || res.Worker == nil {
		t.Fatalf("hang: %+v", res)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		info := b.pool.Pools()[0]
		if info.Lost == 1 && len(info.Workers) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stubborn worker was not killed: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The pool counts the worker lost when it sends the kill; the process is gone soon after.
	for rssBytes(res.Worker.PID) != -1 {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs", res.Worker.PID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stubbornWorker answers initialize, then never answers tools/call.
const stubbornWorker = `
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "stub", "version": "0"}}}), flush=True)
`

// A worker that reads the pool's notifications/cancelled before its handler has the request
// ignores it (mcp-go's server hands each request to a goroutine): the pool sends it again while
// the call is unanswered, so the worker stops the call and stays, instead of running it until
// KillAfter kills it. The stand-in ignores the first notice for its call and answers the second.
func TestWorkerCancelSentAgainUntilAnswered(t *testing.T) {
	needPOSIXTools(t)
	b := setup(t, "stdio", func(c *Config) {
		c.Command = []string{"python3", "-c", deafToFirstCancelWorker}
		c.Workers, c.KillAfter = 1, 20*time.Second
	})
	if err := b.pool.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := b.cancelWhenBusy(t)
	res := b.call(t, ctx, "wait", nil)
	if res.Kind != run.KindCancelled || res.Worker == nil {
		t.Fatalf("cancelled wait: %+v", res)
	}
	start := time.Now()
	if got := pidOf(t, b.call(t, nil, "pid", nil)); got != res.Worker.PID {
		t.Fatalf("the next call ran on pid %d, want the same worker %d (the cancelled one was not freed)", got, res.Worker.PID)
	}
	// The reminder comes 1 s after the cancel; without it the worker is busy until KillAfter (20 s).
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the worker was free again only after %v", d)
	}
	if info := b.pool.Pools()[0]; info.Lost != 0 {
		t.Errorf("a worker was lost: %+v", info)
	}
}

// deafToFirstCancelWorker serves "wait" (answers only once its call was cancelled twice) and
// "pid" (its process id).
const deafToFirstCancelWorker = `
import json, os, sys
def send(m):
    print(json.dumps(m), flush=True)
waiting, notices = None, 0
for line in sys.stdin:
    m = json.loads(line)
    method = m.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "stub", "version": "0"}}})
    elif method == "tools/call" and m["params"]["name"] == "wait":
        waiting, notices = m["id"], 0
    elif method == "tools/call":
        out = {"pid": os.getpid()}
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"content": [{"type": "text", "text": json.dumps(out)}], "structuredContent": out}})
    elif method == "notifications/cancelled" and waiting is not None and m["params"]["requestId"] == waiting:
        notices += 1
        if notices == 2:
            send({"jsonrpc": "2.0", "id": waiting, "result": {"content": [{"type": "text", "text": "stopped"}], "isError": True}})
            waiting = None
`

// Start failures name the command and the end of its stderr.
func TestWorkerStartFailures(t *testing.T) {
	needPOSIXTools(t)
	t.Run("exits at start", func(t *testing.T) {
		b := setup(t, "stdio", func(c *Config) {
			c.Command = []string{"sh", "-c", "echo licence server unreachable >&2; exit 3"}
			c.Workers = 2
		})
		res := b.call(t, nil, "count", nil)
		if !res.IsError || !strings.Contains(res.Message, "licence server unreachable") ||
			!strings.Contains(res.Message, "starting worker `sh -c") {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("never answers", func(t *testing.T) {
		b := setup(t, "stdio", func(c *Config) {
			c.Command = []string{"sh", "-c", "echo loading plugins >&2; sleep 30"}
			c.Workers, c.StartTimeout = 1, 500*time.Millisecond
		})
		start := time.Now()
		res := b.call(t, nil, "count", nil)
		if !res.IsError || !strings.Contains(res.Message, "no answer to initialize within 500ms") ||
			!strings.Contains(res.Message, "loading plugins") || !strings.Contains(res.Message, "sleep 30") {
			t.Fatalf("got %+v", res)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	})
}

// Idle workers stop after IdleStop and start again on demand.
func TestWorkerIdleStop(t *testing.T) {
	b := pooled(t, func(c *Config) { c.Workers, c.IdleStop = 1, 200*time.Millisecond })
	a := pidOf(t, b.call(t, nil, "count", nil))
	deadline := time.Now().Add(5 * time.Second)
	for len(b.pool.Pools()[0].Workers) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle worker did not stop")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := pidOf(t, b.call(t, nil, "count", nil)); c == a {
		t.Fatal("no new worker after the idle stop")
	}
}

func TestWorkerConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Command: []string{"x"}, Workers: -1}, "workers: must be 0 or 1 to 256"},
		{Config{Command: []string{"x"}, Workers: 257}, "workers: must be 0 or 1 to 256"},
		{Config{Command: []string{"x"}, RecycleAfterCalls: -2}, "recycle_after_calls"},
		{Config{Command: []string{"x"}, MaxRSSMB: 1 << 21}, "max_rss_mb"},
		{Config{Command: []string{"x"}, StartTimeout: time.Millisecond}, "start_timeout: must be 0 or 100ms to 168h0m0s"},
		{Config{Command: []string{"x"}, KillAfter: -time.Second}, "kill_after"},
		{Config{Command: []string{"x"}, IdleStop: 8 * 24 * time.Hour}, "idle_stop"},
		{Config{URL: "http://h/mcp", Workers: 2}, "apply to command remotes and to a list of URLs, not to a single url"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// Warm starts every worker of a pool before the first call.
func TestWorkerWarm(t *testing.T) {
	needPOSIXTools(t)
	b := pooled(t, func(c *Config) { c.Workers = 3 })
	if err := b.pool.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	info := b.pool.Pools()[0]
	if len(info.Workers) != 3 || info.Started != 3 {
		t.Fatalf("after Warm: %+v", info)
	}
	for _, w := range info.Workers {
		if w.State != WorkerIdle || w.PID == 0 || w.Calls != 0 {
			t.Errorf("worker %+v", w)
		}
	}
	bad := setup(t, "stdio", func(c *Config) { c.Command, c.Workers = []string{"sh", "-c", "echo no licence >&2; exit 1"}, 2 })
	err := bad.pool.Warm(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no licence") || !strings.Contains(err.Error(), `remote "srv"`) {
		t.Fatalf("Warm of a failing pool: %v", err)
	}
}

// A warm-up's start failures: the same message once, with how many workers it stopped; the
// different ones each once (two workers of one command may fail with different words, a broken
// pipe or a closed transport, as the process exits); errors.Is still reaches each.
func TestWarmFailuresAreSaidOnceEach(t *testing.T) {
	if distinctFailures(nil, 4) != nil {
		t.Fatal("no failures made an error")
	}
	notFound := errors.New(`starting worker "mayapy": executable file not found in $PATH`)
	pipe := errors.New("broken pipe")
	err := distinctFailures([]error{notFound, notFound, pipe, fmt.Errorf("%w", notFound)}, 4)
	want := `starting worker "mayapy": executable file not found in $PATH (3 of 4 workers)` + "\nbroken pipe"
	if err == nil || err.Error() != want || !errors.Is(err, notFound) || !errors.Is(err, pipe) {
		t.Fatalf("got %v; want %q", err, want)
	}
}

// Calls waiting for a busy pool are served in arrival order (the server logs each start).
func TestWorkerQueueIsFIFO(t *testing.T) {
	b := pooled(t, func(c *Config) { c.Workers = 1 })
	var wg sync.WaitGroup
	wg.Go(func() { b.call(t, nil, "sleep", map[string]any{"ms": 400, "key": "first"}) })
	time.Sleep(150 * time.Millisecond)
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		wg.Go(func() {
			if res := b.call(t, nil, "sleep", map[string]any{"ms": 1, "key": key}); res.IsError {
				t.Errorf("%s: %s", key, res.Message)
			}
		})
		time.Sleep(30 * time.Millisecond) // arrival order
	}
	wg.Wait()
	var order []string
	for _, line := range b.logLines(t) {
		if key, ok := strings.CutPrefix(line, "started key="); ok {
			order = append(order, key)
		}
	}
	if strings.Join(order, " ") != "first a b c d e" {
		t.Fatalf("served in order %v, want first a b c d e", order)
	}
}

// Queued counts the calls waiting for a worker of each pool: 3 behind a busy single worker,
// none once they were served.
func TestWorkerQueued(t *testing.T) {
	b := pooled(t, func(c *Config) { c.Workers = 1 })
	if q := b.pool.Queued(); len(q) != 1 || q["srv"] != 0 {
		t.Fatalf("Queued() before any call = %v, want map[srv:0]", q)
	}
	var wg sync.WaitGroup
	wg.Go(func() { b.call(t, nil, "sleep", map[string]any{"ms": 1500, "key": "long"}) })
	for deadline := time.Now().Add(10 * time.Second); len(b.pool.Pools()[0].Workers) == 0 || b.pool.Pools()[0].Workers[0].State != WorkerBusy; {
		if time.Now().After(deadline) {
			t.Fatalf("the first call never made the worker busy: %+v", b.pool.Pools())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, key := range []string{"a", "b", "c"} {
		wg.Go(func() { b.call(t, nil, "sleep", map[string]any{"ms": 1, "key": key}) })
	}
	for deadline := time.Now().Add(time.Second); b.pool.Queued()["srv"] != 3; {
		if time.Now().After(deadline) {
			t.Fatalf("Queued() = %v behind a busy worker, want srv: 3", b.pool.Queued())
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	if q := b.pool.Queued(); q["srv"] != 0 {
		t.Fatalf("Queued() after the calls = %v, want srv: 0", q)
	}
}

// needPOSIXTools skips tests whose stand-in workers are sh or python3 scripts where those are
// not POSIX programs (Windows).
func needPOSIXTools(t *testing.T) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in workers are sh and python3 scripts")
	}
}

// A worker that exits while idle is replaced on the next call, and its pipes and output
// directory (OutputDirEnv) are released.
func TestWorkerExitWhileIdleIsCleanedUp(t *testing.T) {
	b := pooled(t, func(c *Config) { c.Workers = 1 })
	pid := pidOf(t, b.call(t, nil, "count", nil))
	wp := b.pool.remotes["srv"].workers
	wp.mu.Lock()
	proc := wp.workers[0].conn.proc
	wp.mu.Unlock()
	if proc.outDir == "" {
		t.Fatal("the worker has no output directory")
	}
	if _, err := os.Stat(proc.outDir); err != nil {
		t.Fatalf("output directory: %v", err)
	}
	if err := proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-proc.exited
	if got := pidOf(t, b.call(t, nil, "count", nil)); got == pid {
		t.Fatalf("the call ran on the dead worker %d", pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(proc.outDir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead worker's output directory %s is still there", proc.outDir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
