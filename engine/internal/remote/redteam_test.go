package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Hostile workers and servers (issue 33): what a remote sends is bounded per message, a worker
// that passes the bound is killed with what it started, and a malformed answer is invalid_output.

// lowMessageLimit lowers the message size limit to 1 MiB for one test, so that proving the
// engine does not buffer a huge message needs no gigabytes. Tests using it do not run in
// parallel.
func lowMessageLimit(t *testing.T) int64 {
	t.Helper()
	old := maxMessageBytes
	maxMessageBytes = 1 << 20
	t.Cleanup(func() { maxMessageBytes = old })
	return maxMessageBytes
}

// hostileWorker is a stand-in worker: it answers initialize, then tools/call by tool name:
//
//	ok     a valid result naming its pid
//	big    a valid result whose text is args.bytes bytes (the line is 80 bytes longer)
//	flood  writes args.bytes bytes on one line, with no newline, after args.delay_ms, then
//	       sleeps (so that only a kill ends it)
//	spawn  starts `sleep 600` (a grandchild) and answers with its pid
//	exit   exits at once (status 3)
//	bad    answers a result with no "content"; badstr: a result that is a string
const hostileWorker = `
import json, os, subprocess, sys, time
out = sys.stdout
def send(m):
    out.write(json.dumps(m) + "\n"); out.flush()
for line in sys.stdin:
    m = json.loads(line)
    meth, mid = m.get("method"), m.get("id")
    if meth == "initialize" and os.environ.get("FLOOD_INIT"):
        out.write("x" * (2 << 20)); out.flush(); time.sleep(600)
    elif meth == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "0"}}})
    elif meth == "tools/call":
        name, args = m["params"]["name"], m["params"].get("arguments") or {}
        if name == "ok":
            res = {"pid": os.getpid()}
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(res)}], "structuredContent": res}})
        elif name == "flood":
            time.sleep(args.get("delay_ms", 0) / 1000.0)
            out.write('{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "' % json.dumps(mid))
            chunk = "x" * 65536
            for _ in range(int(args["bytes"]) // len(chunk)):
                out.write(chunk)
            out.flush()
            time.sleep(600)
        elif name == "big":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "x" * int(args["bytes"])}]}})
        elif name == "spawn":
            child = subprocess.Popen(["sleep", "600"])
            res = {"pid": os.getpid(), "child": child.pid}
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(res)}], "structuredContent": res}})
        elif name == "exit":
            os._exit(3)
        elif name == "bad":
            send({"jsonrpc": "2.0", "id": mid, "result": {"foo": 1}})
        elif name == "badstr":
            send({"jsonrpc": "2.0", "id": mid, "result": "hello"})
`

// hostilePool is a pool "srv" of one hostileWorker (or a plain stdio remote when workers is 0).
func hostilePool(t *testing.T, workers int, mod func(*Config)) *bundle {
	t.Helper()
	needPOSIXTools(t)
	return setup(t, "stdio", func(c *Config) {
		c.Command = []string{"python3", "-c", hostileWorker}
		c.Workers = workers
		if mod != nil {
			mod(c)
		}
	})
}

// alive reports whether process pid exists and is not a zombie (a container's pid 1 may never
// reap the orphans it inherits).
func alive(pid int) bool {
	if runtime.GOOS == "linux" {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		s := string(data)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			return s[i+2] != 'Z'
		}
		return true
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// awaitGone waits up to 5 s for pid to be gone.
func awaitGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heapInUse is the Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// A worker that writes 20× the limit on one line without a newline: the call fails too_large at
// once (mcp-go's reader never holds more than the limit), the worker is killed, counted lost and
// replaced, and the engine's heap does not grow by the flood.
func TestRedteamWorkerFloodOnOneLineIsKilled(t *testing.T) {
	limit := lowMessageLimit(t)
	b := hostilePool(t, 1, nil)
	first := pidOf(t, b.call(t, nil, "ok", nil))
	before := heapInUse()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	start := time.Now()
	res := b.call(t, ctx, "flood", map[string]any{"bytes": 20 * limit})
	took := time.Since(start)
	if res.Kind != run.KindTooLarge || res.Worker == nil || res.Worker.PID != first {
		t.Fatalf("flood: %+v, want kind too_large on worker %d", res, first)
	}
	for _, want := range []string{"1 MiB", fmt.Sprintf("worker pid %d", first), "killed", "file path"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q lacks %q", res.Message, want)
		}
	}
	if took > 10*time.Second {
		t.Errorf("the call took %v to fail", took)
	}
	awaitGone(t, "the flooding worker", first)
	if grew := int64(heapInUse()) - int64(before); grew > 8*limit {
		t.Errorf("the heap grew by %d bytes over a %d-byte limit", grew, limit)
	}
	if info := b.pool.Pools()[0]; info.Lost != 1 {
		t.Errorf("Pools() = %+v, want 1 lost", info)
	}
	if second := pidOf(t, b.call(t, nil, "ok", nil)); second == first {
		t.Fatalf("the next call ran on the killed worker %d", first)
	}
}

// The case: the step timed out first, and the worker then floods the pipe while the pool
// waits for it to settle (kill_after). It is killed at the limit, not buffered until kill_after.
func TestRedteamWorkerFloodAfterTimeoutIsKilled(t *testing.T) {
	limit := lowMessageLimit(t)
	b := hostilePool(t, 1, func(c *Config) { c.KillAfter = time.Minute })
	first := pidOf(t, b.call(t, nil, "ok", nil))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	res := b.call(t, ctx, "flood", map[string]any{"bytes": 20 * limit, "delay_ms": 300})
	if res.Kind != run.KindTimeout {
		t.Fatalf("flood: %+v, want timeout", res)
	}
	awaitGone(t, "the flooding worker", first)
	deadline := time.Now().Add(5 * time.Second)
	for b.pool.Pools()[0].Lost != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Pools() = %+v, want the killed worker counted lost", b.pool.Pools()[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A remote that is not a pool (one shared stdio connection) is bounded the same way.
func TestRedteamStdioRemoteFloodIsKilled(t *testing.T) {
	limit := lowMessageLimit(t)
	b := hostilePool(t, 0, nil)
	out := b.ok(t, "ok", nil)
	pid, _ := out["pid"].(json.Number).Int64()
	res := b.call(t, nil, "flood", map[string]any{"bytes": 20 * limit})
	if res.Kind != run.KindTooLarge || !strings.Contains(res.Message, "killed") {
		t.Fatalf("flood: %+v, want too_large, killed", res)
	}
	awaitGone(t, "the flooding server", int(pid))
	if again := b.ok(t, "ok", nil); again["pid"] == out["pid"] {
		t.Fatal("the next call ran on the killed process")
	}
}

// A message just under the limit is accepted; one byte over it fails too_large.
func TestRedteamWorkerMessageAtTheLimit(t *testing.T) {
	limit := lowMessageLimit(t)
	b := hostilePool(t, 1, nil)
	res := b.call(t, nil, "big", map[string]any{"bytes": limit - 200})
	if res.IsError {
		t.Fatalf("a result just under the limit: %s: %s", res.Kind, res.Message)
	}
	out, _ := res.Output.(map[string]any)
	if text, _ := out["text"].(string); len(text) != int(limit-200) {
		t.Fatalf("the result's text has %d bytes, want %d", len(text), limit-200)
	}
	if res := b.call(t, nil, "big", map[string]any{"bytes": limit}); res.Kind != run.KindTooLarge {
		t.Fatalf("a result just over the limit: %+v, want too_large", res)
	}
}

// What a worker forks dies with it: when the pool closes it (stdin closed, the worker exits and
// leaves its child behind), when it exits by itself, and when it is killed for a flood.
func TestRedteamWorkerGrandchildrenDieWithIt(t *testing.T) {
	spawn := func(t *testing.T, b *bundle) (int, int) {
		t.Helper()
		res := b.call(t, nil, "spawn", nil)
		pid := pidOf(t, res)
		out, _ := res.Output.(map[string]any)
		child, err := out["child"].(json.Number).Int64()
		if err != nil || !alive(int(child)) {
			t.Fatalf("spawn: %#v: no live child", res.Output)
		}
		return pid, int(child)
	}
	t.Run("closed", func(t *testing.T) {
		b := hostilePool(t, 1, nil)
		pid, child := spawn(t, b)
		b.pool.Close()
		awaitGone(t, "the worker", pid)
		awaitGone(t, "the worker's child", child)
	})
	t.Run("exited", func(t *testing.T) {
		b := hostilePool(t, 1, nil)
		pid, child := spawn(t, b)
		if res := b.call(t, nil, "exit", nil); res.Kind != run.KindWorkerLost {
			t.Fatalf("exit: %+v", res)
		}
		awaitGone(t, "the worker", pid)
		awaitGone(t, "the worker's child", child)
	})
	t.Run("killed", func(t *testing.T) {
		limit := lowMessageLimit(t)
		b := hostilePool(t, 1, nil)
		pid, child := spawn(t, b)
		if res := b.call(t, nil, "flood", map[string]any{"bytes": 20 * limit}); res.Kind != run.KindTooLarge {
			t.Fatalf("flood: %+v", res)
		}
		awaitGone(t, "the worker", pid)
		awaitGone(t, "the worker's child", child)
	})
}

// An answer that is JSON-RPC but not an MCP tool result fails invalid_output, saying what is
// wrong; the worker stays in service.
func TestRedteamMalformedWorkerAnswerIsInvalidOutput(t *testing.T) {
	for _, workers := range []int{1, 0} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			b := hostilePool(t, workers, nil)
			for tool, want := range map[string]string{"bad": "content is missing", "badstr": "cannot unmarshal string"} {
				res := b.call(t, nil, tool, nil)
				if res.Kind != run.KindInvalidOutput || !strings.Contains(res.Message, "not a valid MCP tool result") ||
					!strings.Contains(res.Message, want) {
					t.Errorf("%s: %+v, want invalid_output naming %q", tool, res, want)
				}
			}
			if workers > 0 {
				b.call(t, nil, "ok", nil)
				if info := b.pool.Pools()[0]; info.Lost != 0 || info.Started != 1 {
					t.Errorf("Pools() = %+v, want the worker kept", info)
				}
			}
		})
	}
}

// floodServer is a streamable HTTP MCP server on 127.0.0.1 that answers initialize, and answers
// tools/call with a body of size bytes: one JSON document, or (sse) one event whose data never
// ends.
func floodServer(t *testing.T, size int64, sse bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch req.Method {
		case "initialize":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Mcp-Session-Id", "s1")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"flood","version":"0"}}}`,
				req.ID, req.Params.ProtocolVersion)
		case "tools/call":
			bw := bufio.NewWriter(w)
			if sse {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(bw, `data: {"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, req.ID)
			} else {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, req.ID)
			}
			chunk := strings.Repeat("x", 1<<16)
			for n := int64(0); n < size; n += int64(len(chunk)) {
				if _, err := bw.WriteString(chunk); err != nil {
					return // the client hung up
				}
			}
			bw.WriteString(`"}]}}`)
			if sse {
				bw.WriteString("\n\n")
			}
			bw.Flush()
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// A server's response body (JSON) or SSE event over the limit fails the call too_large without
// being read whole; for a pool of servers the session is ended and counted lost.
func TestRedteamRemoteHTTPBodyIsBounded(t *testing.T) {
	limit := lowMessageLimit(t)
	for _, sse := range []bool{false, true} {
		for _, pooled := range []bool{false, true} {
			t.Run(fmt.Sprintf("sse=%v,pool=%v", sse, pooled), func(t *testing.T) {
				url := floodServer(t, 20*limit, sse)
				cfg := Config{URL: url}
				if pooled {
					cfg = Config{URLs: []string{url}}
				}
				pool, err := NewPool(map[string]Config{"srv": cfg})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				b := &bundle{pool: pool}
				before := heapInUse()
				res := b.call(t, nil, "flood", nil)
				if res.Kind != run.KindTooLarge || !strings.Contains(res.Message, "1 MiB") {
					t.Fatalf("flood: %+v, want too_large naming the limit", res)
				}
				if grew := int64(heapInUse()) - int64(before); grew > 8*limit {
					t.Errorf("the heap grew by %d bytes over a %d-byte limit", grew, limit)
				}
				if pooled {
					if info := pool.Pools()[0]; info.Lost != 1 {
						t.Errorf("Pools() = %+v, want the session counted lost", info)
					}
				}
			})
		}
	}
}

// A real `dcc-flow worker` whose tool returns just over the limit: the call fails too_large, the
// worker is killed and replaced, and the next call is served.
func TestRedteamRealWorkerResultOverTheLimit(t *testing.T) {
	needPOSIXTools(t)
	limit := lowMessageLimit(t)
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	python := filepath.Join(root, ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Skip("no Python to run dcc-flow worker")
		}
	}
	if _, err := os.Stat(filepath.Join(root, "python", "dcc_flow", "_lib", "libdccflow.so")); err != nil {
		if os.Getenv("CI") == "true" { // make test builds it before the Go tests: not finding it is a failure there
			t.Fatal("dcc-flow worker needs the native library: `make lib`")
		}
		t.Skip("dcc-flow worker needs the native library: `make lib` (make test and make redteam build it)")
	}
	tools := filepath.Join(t.TempDir(), "big_tools.py")
	if err := os.WriteFile(tools, []byte(`
import os

def register(engine):
    @engine.tool(name="big")
    def big(n=0):
        return {"pid": os.getpid(), "data": "x" * n}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	b := setup(t, "stdio", func(c *Config) {
		c.Command = []string{python, "-m", "dcc_flow", "worker", "--tools", tools}
		c.Env = map[string]string{"PYTHONPATH": filepath.Join(root, "python")}
		c.Workers = 1
	})
	first := pidOf(t, b.call(t, nil, "big", map[string]any{"n": 10}))
	res := b.call(t, nil, "big", map[string]any{"n": limit / 2}) // its text and structuredContent: over
	if res.Kind != run.KindTooLarge || res.Worker == nil || res.Worker.PID != first {
		t.Fatalf("big: %+v, want too_large on worker %d", res, first)
	}
	awaitGone(t, "the worker", first)
	if second := pidOf(t, b.call(t, nil, "big", map[string]any{"n": 10})); second == first {
		t.Fatal("the next call ran on the killed worker")
	}
	if info := b.pool.Pools()[0]; info.Lost != 1 || info.Started != 2 {
		t.Errorf("Pools() = %+v, want 1 lost of 2 started", info)
	}
}

// A worker's _meta output lines are kept as an in-process tool's are, whatever it sends: the
// newest run.MaxStepLogLines, each cut to run.MaxLogLineBytes, the rest counted.
func TestRedteamWorkerOutputLinesAreCapped(t *testing.T) {
	long := strings.Repeat("é", 10000) // 20,000 bytes
	entries := make([]any, 5000)
	for i := range entries {
		entries[i] = map[string]any{"stream": "stdout", "text": fmt.Sprintf("%d %s", i, long)}
	}
	meta := &mcp.Meta{AdditionalFields: map[string]any{OutputMetaKey: entries, OutputDroppedMetaKey: float64(7)}}
	lines, dropped := logsFromMeta(meta)
	if len(lines) != run.MaxStepLogLines || dropped != 4007 {
		t.Fatalf("%d lines, %d dropped; want %d and 4007", len(lines), dropped, run.MaxStepLogLines)
	}
	for _, l := range lines {
		if len(l.Text) > run.MaxLogLineBytes || !strings.HasSuffix(l.Text, "…") || !utf8.ValidString(l.Text) {
			t.Fatalf("line of %d bytes (limit %d): %.40q…", len(l.Text), run.MaxLogLineBytes, l.Text)
		}
	}
	if !strings.HasPrefix(lines[0].Text, "4000 ") {
		t.Errorf("first kept line %.20q, want the newest lines (4000 on)", lines[0].Text)
	}
	meta.AdditionalFields[OutputDroppedMetaKey] = float64(1e300)
	if _, dropped := logsFromMeta(meta); dropped <= 0 {
		t.Errorf("a huge dropped count gave %d", dropped)
	}
}

// A worker that floods before it answers initialize fails to start, killed, saying why.
func TestRedteamWorkerFloodBeforeInitialize(t *testing.T) {
	lowMessageLimit(t)
	b := hostilePool(t, 1, func(c *Config) { c.Env = map[string]string{"FLOOD_INIT": "1"} })
	res := b.call(t, nil, "ok", nil)
	if !res.IsError || !strings.Contains(res.Message, "wrote a message over 1 MiB") {
		t.Fatalf("ok: %+v, want a start failure naming the limit", res)
	}
}
