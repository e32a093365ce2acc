// Command mcpserver is a small MCP server for tests of dcc-flow's `tool_remote` client
// (engine/internal/remote). It uses mark3labs/mcp-go's server and serves over stdio (the
// default) or over streamable HTTP:
//
//	mcpserver [-log PATH] [-http 127.0.0.1:0] [-token SECRET]
//
// With -http the server listens on the given address (port 0 picks a free one), prints the
// endpoint URL (http://ADDR/mcp) as the first line of stdout, and runs until stdin is closed, so
// a test that dies does not leave it behind. -token makes every HTTP request need the header
// `Authorization: Bearer SECRET` (401 otherwise). In stdio mode it exits when stdin is closed.
//
// Tools (every `key` argument is optional and defaults to ""):
//
//	echo {…}                      returns its arguments as structuredContent.
//	sleep {ms, key}               waits ms milliseconds or until the call is cancelled; returns
//	                              {"slept_ms": ms}, or a tool error with kind "cancelled".
//	fail {times, kind, key, as_text, message}
//	                              the first `times` calls per key return isError with
//	                              structuredContent {"kind": kind, "message": …} (with as_text,
//	                              the same object only as JSON text); later calls return
//	                              {"ok": true, "calls": n}.
//	count {key}                   counts calls per key; returns {"key", "count", "pid",
//	                              "session", "handshakes", "connections", "header"}, where
//	                              handshakes counts initialize requests, connections counts
//	                              accepted TCP connections (HTTP only) and header is the value
//	                              of the request header X-Dcc-Flow-Test (HTTP only).
//	await {event, key, ms}        waits up to ms (default 10000) until event happened for key;
//	                              returns {"event", "key", "happened"}. Events: "started" (a
//	                              sleep began), "notified" (a notifications/cancelled for a
//	                              sleep call arrived on the wire), "cancelled" (a sleep saw
//	                              its context end).
//	crash {code}                  writes "crash requested" to stderr and exits at once with
//	                              code (default 3), without answering.
//	getenv {name}                 returns {"name", "value", "set"}: the variable in the
//	                              server's environment (what a stdio child was started with).
//
// The -log file gets one line per event, appended as it happens:
//
//	started key=K
//	notified key=K request=ID
//	cancelled key=K
//
// "notified" is written by a reader that sits in front of mcp-go (a line reader on stdin, an
// HTTP middleware), so it records the notifications/cancelled message itself, not only its
// effect.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	logPath := flag.String("log", "", "append event lines to this file")
	httpAddr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	token := flag.String("token", "", "HTTP only: require Authorization: Bearer TOKEN")
	flag.Parse()

	if err := run(*logPath, *httpAddr, *token); err != nil {
		fmt.Fprintln(os.Stderr, "mcpserver:", err)
		os.Exit(1)
	}
}

func run(logPath, httpAddr, token string) error {
	st := &state{counts: map[string]int{}, fails: map[string]int{}, events: map[string]chan struct{}{}, calls: map[string]string{}}
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		st.log = f
	}
	s := newServer(st)
	if httpAddr == "" {
		return serveStdio(s, st)
	}
	return serveHTTP(s, st, httpAddr, token)
}

// state is what the tools share. Events are channels closed once, keyed "event key".
type state struct {
	mu          sync.Mutex
	counts      map[string]int
	fails       map[string]int
	events      map[string]chan struct{}
	calls       map[string]string // "session/request id" of a sleep call -> its key
	log         *os.File
	handshakes  atomic.Int64
	connections atomic.Int64
}

func (st *state) event(name, key string) chan struct{} {
	id := name + " " + key
	ch, ok := st.events[id]
	if !ok {
		ch = make(chan struct{})
		st.events[id] = ch
	}
	return ch
}

// signal records that event name happened for key: it appends line to the log first, then
// wakes the awaiters, so a test that awaited the event can read the line.
func (st *state) signal(name, key, line string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.log != nil {
		fmt.Fprintln(st.log, line)
	}
	ch := st.event(name, key)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// observe looks at one raw JSON-RPC message before mcp-go handles it: it remembers which key
// each sleep call carries, and records a notifications/cancelled for such a call.
func (st *state) observe(session string, raw []byte) {
	var msg struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
		Params struct {
			Name      string          `json:"name"`
			Arguments map[string]any  `json:"arguments"`
			RequestID json.RawMessage `json:"requestId"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &msg) != nil {
		return
	}
	switch msg.Method {
	case "tools/call":
		if msg.Params.Name != "sleep" {
			return
		}
		key, _ := msg.Params.Arguments["key"].(string)
		st.mu.Lock()
		st.calls[session+"/"+string(msg.ID)] = key
		st.mu.Unlock()
	case "notifications/cancelled":
		st.mu.Lock()
		key, ok := st.calls[session+"/"+string(msg.Params.RequestID)]
		st.mu.Unlock()
		if ok {
			st.signal("notified", key, fmt.Sprintf("notified key=%s request=%s", key, msg.Params.RequestID))
		}
	}
}

func newServer(st *state) *server.MCPServer {
	hooks := &server.Hooks{}
	hooks.AddAfterInitialize(func(context.Context, any, *mcp.InitializeRequest, *mcp.InitializeResult) {
		st.handshakes.Add(1)
	})
	s := server.NewMCPServer("dcc-flow-test-mcpserver", "1.0.0", server.WithToolCapabilities(false), server.WithHooks(hooks))

	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("Returns its arguments as structuredContent.")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if len(req.Params.RawArguments) > 0 { // exact, where GetArguments has float64s
				return mcp.NewToolResultStructuredOnly(req.Params.RawArguments), nil
			}
			return mcp.NewToolResultStructuredOnly(req.GetArguments()), nil
		})

	s.AddTool(mcp.NewTool("sleep", mcp.WithDescription("Waits ms milliseconds or until cancelled."),
		mcp.WithNumber("ms", mcp.Required()), mcp.WithString("key")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			ms := req.GetInt("ms", 0)
			key := req.GetString("key", "")
			st.signal("started", key, "started key="+key)
			timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
			defer timer.Stop()
			select {
			case <-timer.C:
				return mcp.NewToolResultStructuredOnly(map[string]any{"slept_ms": ms}), nil
			case <-ctx.Done():
				st.signal("cancelled", key, "cancelled key="+key)
				return toolError(map[string]any{"kind": "cancelled", "message": "sleep cancelled"}, false), nil
			}
		})

	s.AddTool(mcp.NewTool("fail", mcp.WithDescription("Fails the first `times` calls per key with `kind`."),
		mcp.WithNumber("times"), mcp.WithString("kind"), mcp.WithString("key"), mcp.WithBoolean("as_text"),
		mcp.WithString("message")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key := req.GetString("key", "")
			st.mu.Lock()
			st.fails[key]++
			n := st.fails[key]
			st.mu.Unlock()
			if n > req.GetInt("times", 1) {
				return mcp.NewToolResultStructuredOnly(map[string]any{"ok": true, "calls": n}), nil
			}
			body := map[string]any{"message": req.GetString("message", "failure "+strconv.Itoa(n))}
			if kind := req.GetString("kind", ""); kind != "" {
				body["kind"] = kind
			}
			return toolError(body, req.GetBool("as_text", false)), nil
		})

	s.AddTool(mcp.NewTool("count", mcp.WithDescription("Counts calls per key and reports the connection."),
		mcp.WithString("key")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key := req.GetString("key", "")
			st.mu.Lock()
			st.counts[key]++
			n := st.counts[key]
			st.mu.Unlock()
			session := ""
			if cs := server.ClientSessionFromContext(ctx); cs != nil {
				session = cs.SessionID()
			}
			return mcp.NewToolResultStructuredOnly(map[string]any{
				"key": key, "count": n, "pid": os.Getpid(), "session": session,
				"handshakes": st.handshakes.Load(), "connections": st.connections.Load(),
				"header": req.Header.Get("X-Dcc-Flow-Test"),
			}), nil
		})

	s.AddTool(mcp.NewTool("await", mcp.WithDescription("Waits until an event happened for a key."),
		mcp.WithString("event", mcp.Required()), mcp.WithString("key"), mcp.WithNumber("ms")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			event := req.GetString("event", "")
			key := req.GetString("key", "")
			st.mu.Lock()
			ch := st.event(event, key)
			st.mu.Unlock()
			timer := time.NewTimer(time.Duration(req.GetInt("ms", 10000)) * time.Millisecond)
			defer timer.Stop()
			happened := true
			select {
			case <-ch:
			case <-timer.C:
				happened = false
			case <-ctx.Done():
				happened = false
			}
			return mcp.NewToolResultStructuredOnly(map[string]any{"event": event, "key": key, "happened": happened}), nil
		})

	s.AddTool(mcp.NewTool("getenv", mcp.WithDescription("Returns a variable of the server's environment."),
		mcp.WithString("name")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := req.GetString("name", "")
			value, set := os.LookupEnv(name)
			return mcp.NewToolResultStructuredOnly(map[string]any{"name": name, "value": value, "set": set}), nil
		})
	s.AddTool(mcp.NewTool("crash", mcp.WithDescription("Exits the server at once."), mcp.WithNumber("code")),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fmt.Fprintln(os.Stderr, "crash requested")
			os.Exit(req.GetInt("code", 3))
			return nil, nil
		})
	return s
}

// toolError returns an isError result carrying body as structuredContent and as JSON text, or,
// with asText, only as JSON text.
func toolError(body map[string]any, asText bool) *mcp.CallToolResult {
	text, _ := json.Marshal(body)
	res := mcp.NewToolResultError(string(text))
	if !asText {
		res.StructuredContent = body
	}
	return res
}

// serveStdio serves on stdin/stdout until stdin is closed. A line reader in front of mcp-go
// lets observe see every message.
func serveStdio(s *server.MCPServer, st *state) error {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
		for sc.Scan() {
			line := sc.Bytes()
			st.observe("", line)
			if _, err := pw.Write(append(line, '\n')); err != nil {
				return
			}
		}
		pw.CloseWithError(sc.Err())
	}()
	stdio := server.NewStdioServer(s)
	stdio.SetErrorLogger(log.New(os.Stderr, "mcpserver: ", 0))
	server.WithWorkerPoolSize(16)(stdio)
	err := stdio.Listen(context.Background(), pr, os.Stdout)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// serveHTTP serves streamable HTTP on addr until stdin is closed.
func serveHTTP(s *server.MCPServer, st *state, addr, token string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// Stateful, so that a restarted server answers 404 to the sessions of the one before, as
	// the spec asks (mcp-go's default accepts any session id).
	mcpHandler := server.NewStreamableHTTPServer(s, server.WithStateful(true))
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			st.observe(r.Header.Get("Mcp-Session-Id"), body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		mcpHandler.ServeHTTP(w, r)
	})
	srv := &http.Server{
		Handler: mux,
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateNew {
				st.connections.Add(1)
			}
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Printf("http://%s/mcp\n", ln.Addr())

	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
