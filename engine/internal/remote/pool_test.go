package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// prompt is how soon a cancelled or timed-out call must return. The goal is far lower; this
// only catches a call that waits for the remote.
const prompt = 2 * time.Second

func TestCallEcho(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			args := map[string]any{"scene": "/shots/a.ma", "frames": 24, "big": int64(1) << 60,
				"tags": []any{"x", true, nil}, "nested": map[string]any{"f": 1.5}}
			res := b.call(t, nil, "echo", args)
			want := map[string]any{"scene": "/shots/a.ma", "frames": json.Number("24"),
				"big": json.Number("1152921504606846976"), "tags": []any{"x", true, nil},
				"nested": map[string]any{"f": json.Number("1.5")}}
			if res.IsError || !reflect.DeepEqual(res.Output, want) {
				t.Fatalf("echo = %+v, want output %v", res, want)
			}
			if res := b.call(t, nil, "echo", nil); res.IsError || !reflect.DeepEqual(res.Output, map[string]any{}) {
				t.Fatalf("echo with nil args = %+v, want {}", res)
			}
		})
	}
}

func TestConnectionReuse(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			first := b.ok(t, "count", map[string]any{"key": "reuse"})
			for i := 2; i <= 20; i++ {
				out := b.ok(t, "count", map[string]any{"key": "reuse"})
				if out["count"] != json.Number(fmt.Sprint(i)) {
					t.Fatalf("call %d: count = %v", i, out["count"])
				}
				for _, field := range []string{"pid", "session", "handshakes", "connections"} {
					if out[field] != first[field] {
						t.Fatalf("call %d: %s = %v, first call had %v", i, field, out[field], first[field])
					}
				}
			}
			if first["handshakes"] != json.Number("1") {
				t.Fatalf("handshakes = %v, want 1", first["handshakes"])
			}
			if tr == "http" {
				if first["session"] == "" {
					t.Fatal("no HTTP session id")
				}
				if first["connections"] != json.Number("1") {
					t.Fatalf("TCP connections = %v, want 1 (keep-alive)", first["connections"])
				}
			}
		})
	}
}

func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			const n = 32
			var wg sync.WaitGroup
			errs := make(chan string, n)
			for i := range n {
				wg.Go(func() {
					res, err := b.pool.Call(t.Context(), "srv", "echo", map[string]any{"i": i})
					if err != nil || res.IsError || !reflect.DeepEqual(res.Output, map[string]any{"i": json.Number(fmt.Sprint(i))}) {
						errs <- fmt.Sprintf("call %d: %+v, %v", i, res, err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			if out := b.ok(t, "count", nil); out["handshakes"] != json.Number("1") {
				t.Fatalf("handshakes = %v after concurrent calls, want 1", out["handshakes"])
			}
		})
	}
}

// TestCancellationReachesRemote ends a call in flight three ways and checks that the call
// returns at once with the right kind, and that the server received notifications/cancelled
// for it and saw its handler's context end.
func TestCancellationReachesRemote(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		timeout  time.Duration // Config.Timeout
		deadline time.Duration // the caller's deadline; 0 = cancel by hand
		want     string
	}{
		{name: "cancel", want: run.KindCancelled},
		{name: "caller_deadline", deadline: 300 * time.Millisecond, want: run.KindTimeout},
		{name: "config_timeout", timeout: 2 * time.Second, want: run.KindTimeout},
	}
	for _, tr := range transports {
		for _, tc := range cases {
			t.Run(tr+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, tr, func(c *Config) { c.Timeout = tc.timeout })
				key := tr + "-" + tc.name
				// Connect first, so that the deadlines below only cover the sleep.
				b.ok(t, "count", nil)

				// start is taken before the deadline is set: the call cannot end before start+deadline
				// (taken after it, a descheduled goroutine or a Windows clock tick made 294 ms of 300).
				start := time.Now()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.deadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				type outcome struct {
					res   Result
					ended time.Time
				}
				done := make(chan outcome, 1)
				go func() {
					res, err := b.pool.Call(ctx, "srv", "sleep", map[string]any{"ms": 60000, "key": key})
					if err != nil {
						res = Result{IsError: true, Kind: "misuse", Message: err.Error()}
					}
					done <- outcome{res, time.Now()}
				}()

				if tc.deadline == 0 && tc.timeout == 0 {
					// A second call on the same connection while the sleep runs.
					if !b.await(t, "started", key, 10000) {
						t.Fatal("the sleep did not start")
					}
					cancel()
				}
				var o outcome
				select {
				case o = <-done:
				case <-time.After(callTimeout):
					t.Fatal("the call did not return")
				}
				if o.res.Kind != tc.want || !o.res.IsError || o.res.Output != nil {
					t.Fatalf("result = %+v, want kind %s", o.res, tc.want)
				}
				if limit := max(tc.deadline, tc.timeout); limit > 0 {
					if took := o.ended.Sub(start); took < limit || took > limit+prompt {
						t.Fatalf("the call took %v, want %v", took, limit)
					}
				}

				// The config timeout also bounds these calls: keep their waits below it.
				wait := 10000
				if tc.timeout > 0 {
					wait = int(tc.timeout/time.Millisecond) / 2
				}
				if !b.await(t, "notified", key, wait) {
					t.Fatal("the server received no notifications/cancelled for the call")
				}
				if !b.await(t, "cancelled", key, wait) {
					t.Fatal("the server's handler did not see the cancellation")
				}
				lines := b.logLines(t)
				for _, prefix := range []string{"started key=" + key, "notified key=" + key + " request=", "cancelled key=" + key} {
					if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) }) {
						t.Errorf("no log line %q in %q", prefix, lines)
					}
				}
			})
		}
	}
}

// TestCancelIsPrompt checks that a cancelled call does not wait for the remote to stop.
func TestCancelIsPrompt(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			key := "prompt-" + tr
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan Result, 1)
			go func() {
				res, _ := b.pool.Call(ctx, "srv", "sleep", map[string]any{"ms": 60000, "key": key})
				done <- res
			}()
			if !b.await(t, "started", key, 10000) {
				t.Fatal("the sleep did not start")
			}
			start := time.Now()
			cancel()
			select {
			case res := <-done:
				if res.Kind != run.KindCancelled {
					t.Fatalf("kind = %q, want cancelled", res.Kind)
				}
				if d := time.Since(start); d > prompt {
					t.Fatalf("returned %v after cancel", d)
				}
			case <-time.After(callTimeout):
				t.Fatal("the call did not return")
			}
		})
	}
}

func TestToolErrorKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		args     map[string]any
		wantKind string
		wantMsg  string
	}{
		{"structured kind", map[string]any{"kind": "transient", "message": "disk busy"}, "transient", "disk busy"},
		{"kind in JSON text", map[string]any{"kind": "fatal", "as_text": true, "message": "bad scene"}, "fatal", "bad scene"},
		{"no kind", map[string]any{"message": "it broke"}, run.KindError, "it broke"},
		{"tool's own kind, message from the text", map[string]any{"kind": "disk_full"}, "disk_full", "failure "},
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					args := map[string]any{"times": 2, "key": tc.name}
					for k, v := range tc.args {
						args[k] = v
					}
					for attempt := 1; attempt <= 2; attempt++ {
						res := b.call(t, nil, "fail", args)
						if !res.IsError || res.Kind != tc.wantKind || !strings.HasPrefix(res.Message, tc.wantMsg) {
							t.Fatalf("attempt %d: %+v, want kind %q message %q", attempt, res, tc.wantKind, tc.wantMsg)
						}
					}
					if out := b.ok(t, "fail", args); out["ok"] != true {
						t.Fatalf("third call: %v, want ok", out)
					}
				})
			}
		})
	}
}

func TestUnknownTool(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			res := b.call(t, nil, "no_such_tool", nil)
			if res.Kind != run.KindNotFound || !strings.Contains(res.Message, "no_such_tool") {
				t.Fatalf("result = %+v, want kind not_found naming the tool", res)
			}
			// The connection is still good.
			b.ok(t, "echo", nil)
		})
	}
}

func TestConnectFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()

	cases := []struct {
		name     string
		cfg      Config
		wantKind string
		wantMsg  string
	}{
		{"unreachable URL", Config{URL: closedURL}, run.KindTransient, "refused"},
		{"missing program", Config{Command: []string{"/nonexistent/dcc-flow-test-server"}}, run.KindFatal, "nonexistent"},
		{"child exits at once", Config{Command: []string{serverBin, "-no-such-flag"}}, run.KindTransient, "no-such-flag"},
		{"not an MCP endpoint", Config{URL: "http://" + startHTTPServer(t, "127.0.0.1:0").addr + "/elsewhere"}, run.KindFatal, "4xx"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, err := NewPool(map[string]Config{"srv": tc.cfg})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			res, err := pool.Call(t.Context(), "srv", "echo", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !res.IsError || res.Kind != tc.wantKind || !strings.Contains(res.Message, tc.wantMsg) {
				t.Fatalf("result = %+v, want kind %s and a message with %q", res, tc.wantKind, tc.wantMsg)
			}
		})
	}
}

// TestServerDiesMidCall kills the server during a call: that call fails with kind transient
// and the next one connects to a new server.
func TestServerDiesMidCall(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			before := b.ok(t, "count", nil)

			res := b.call(t, nil, "crash", nil)
			if !res.IsError || res.Kind != run.KindTransient {
				t.Fatalf("crash: %+v, want kind transient", res)
			}
			if tr == "stdio" && !strings.Contains(res.Message, "crash requested") {
				t.Errorf("message %q does not carry the child's stderr", res.Message)
			}
			if tr == "http" {
				b.http.exited(t)
				startHTTPServer(t, b.http.addr, "-log", b.logPath)
			}

			after := b.ok(t, "count", nil)
			if after["pid"] == before["pid"] {
				t.Fatalf("pid %v unchanged: no new server", after["pid"])
			}
			if after["handshakes"] != json.Number("1") || after["count"] != json.Number("1") {
				t.Fatalf("after reconnect: %v, want a fresh server with one handshake", after)
			}
			if tr == "http" && after["session"] == before["session"] {
				t.Fatalf("session %v unchanged", after["session"])
			}
		})
	}
}

// TestChildExitBetweenCalls: a stdio child that exited while idle is replaced by the next
// call, which does not fail.
func TestChildExitBetweenCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio", nil)
	before := b.ok(t, "count", nil)
	c := b.connOf(t)
	if err := c.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-c.proc.exited
	after := b.ok(t, "count", nil)
	if after["pid"] == before["pid"] {
		t.Fatal("same pid after the child exited")
	}
}

// TestHTTPSessionLost: a server that forgot the session (restarted between calls) answers
// 404; the call reconnects and succeeds without failing.
func TestHTTPSessionLost(t *testing.T) {
	t.Parallel()
	b := setup(t, "http", nil)
	before := b.ok(t, "count", nil)
	c := b.connOf(t)
	// Close the idle keep-alive connection, then replace the server at the same address.
	b.http.stop()
	c.httpT.CloseIdleConnections()
	startHTTPServer(t, b.http.addr)
	after := b.ok(t, "count", nil)
	if after["session"] == before["session"] || after["pid"] == before["pid"] {
		t.Fatalf("after = %v, before = %v: want a new server and session", after, before)
	}
}

func (b *bundle) connOf(t *testing.T) *conn {
	t.Helper()
	r := b.pool.remotes["srv"]
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		t.Fatal("no connection")
	}
	return r.conn
}

// TestHTTPAuth runs without t.Parallel: it sets an environment variable.
func TestHTTPAuth(t *testing.T) {
	const env = "DCC_FLOW_REMOTE_TEST_TOKEN"
	srv := startHTTPServer(t, "127.0.0.1:0", "-token", "s3cret")
	pool, err := NewPool(map[string]Config{"srv": {URL: srv.url, TokenEnv: env,
		Headers: map[string]string{"X-Dcc-Flow-Test": "studio-a"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	call := func() Result {
		res, err := pool.Call(t.Context(), "srv", "count", nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	t.Setenv(env, "")
	if res := call(); res.Kind != run.KindPermission || !strings.Contains(res.Message, env) {
		t.Fatalf("without a token: %+v, want kind permission naming %s", res, env)
	}
	t.Setenv(env, "wrong")
	if res := call(); res.Kind != run.KindPermission {
		t.Fatalf("with a wrong token: %+v, want kind permission", res)
	}
	t.Setenv(env, "s3cret")
	res := call()
	if res.IsError {
		t.Fatalf("with the token: %+v", res)
	}
	if got := res.Output.(map[string]any)["header"]; got != "studio-a" {
		t.Fatalf("header X-Dcc-Flow-Test = %v, want studio-a", got)
	}
}

func TestCallMisuse(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio", nil)
	_, err := b.pool.Call(t.Context(), "unreal", "import_assets", nil)
	var re *run.Error
	if !errors.As(err, &re) || re.Code != run.CodeNotFound || !strings.Contains(re.Message, `"unreal"`) ||
		!strings.Contains(re.Message, "srv") {
		t.Fatalf("unknown remote: %v, want not_found naming unreal and the known remote srv", err)
	}
	if _, err := b.pool.Call(t.Context(), "srv", "", nil); run.CodeOf(err) != run.CodeInvalidInput {
		t.Fatalf("empty tool: %v, want invalid_input", err)
	}
	empty, err := NewPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := empty.Call(t.Context(), "x", "y", nil); err == nil || !strings.Contains(err.Error(), "no remotes are configured") {
		t.Fatalf("empty pool: %v", err)
	}
	empty.Close()
}

// TestClose: in-flight calls end with kind cancelled, the child is gone, later calls fail
// with code closed, and Close can be called again.
func TestClose(t *testing.T) {
	t.Parallel()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, nil)
			done := make(chan Result, 1)
			go func() {
				res, _ := b.pool.Call(t.Context(), "srv", "sleep", map[string]any{"ms": 60000, "key": "close"})
				done <- res
			}()
			if !b.await(t, "started", "close", 10000) {
				t.Fatal("the sleep did not start")
			}
			c := b.connOf(t)
			b.pool.Close()
			select {
			case res := <-done:
				if res.Kind != run.KindCancelled {
					t.Fatalf("in-flight call: %+v, want kind cancelled", res)
				}
			case <-time.After(callTimeout):
				t.Fatal("the in-flight call did not return")
			}
			if c.proc != nil && !c.proc.hasExited() {
				t.Fatal("the child still runs after Close")
			}
			if _, err := b.pool.Call(t.Context(), "srv", "echo", nil); run.CodeOf(err) != run.CodeClosed {
				t.Fatalf("call after Close: %v, want code closed", err)
			}
			b.pool.Close()
		})
	}
}

func TestNewPoolInvalid(t *testing.T) {
	t.Parallel()
	_, err := NewPool(map[string]Config{
		"maya":   {Command: []string{"mayapy"}, Timeout: -time.Second},
		"unreal": {URL: "ftp://host/mcp"},
		"":       {URL: "http://x/mcp"},
	})
	var re *run.Error
	if !errors.As(err, &re) || re.Code != run.CodeInvalidInput {
		t.Fatalf("err = %v, want invalid_input", err)
	}
	for _, want := range []string{`remote "maya": timeout:`, `remote "unreal": url: scheme`, "remote name must not be empty"} {
		if !strings.Contains(re.Message, want) {
			t.Errorf("message %q lacks %q", re.Message, want)
		}
	}
	if problems, _ := re.Details["problems"].([]string); len(problems) != 3 {
		t.Errorf("problems = %q, want 3", problems)
	}
}
