package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
)

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
	`"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func listen(t *testing.T, token string, opts ...mcpserver.HTTPOption) *mcpserver.HTTPServer {
	t.Helper()
	e, err := engine.Open(context.Background(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	hs, err := mcpserver.New(e).ListenHTTP("127.0.0.1:0", token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hs.Close(context.Background()) })
	return hs
}

func mcpPost(t *testing.T, url string, body io.Reader, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// endless is a body that never ends (a chunked upload of 'x'), counting what was read from it.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	if e.n > 64<<20 {
		return 0, errors.New("the server read 64 MiB of a body over its limit")
	}
	for i := range p {
		p[i] = 'x'
	}
	e.n += int64(len(p))
	return len(p), nil
}

// TestRedteamMCPBodyLimit: a request body over the cap is 413 payload_too_large, before the body
// is read when Content-Length says so, and after at most the cap for a chunked body; the
// server's heap does not grow by the body. Before the fix a 200 MB initialize was answered 200.
func TestRedteamMCPBodyLimit(t *testing.T) {
	hs := listen(t, "")
	// Content-Length over the default (8 MiB): refused from the header, nothing read.
	conn, err := net.Dial("tcp", hs.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /mcp HTTP/1.1\r\nHost: "+hs.Addr()+"\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: 200000000\r\n\r\n{")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, _ := io.ReadAtLeast(conn, buf, 12)
	if got := string(buf[:n]); !strings.HasPrefix(got, "HTTP/1.1 413") || !strings.Contains(got, "payload_too_large") {
		t.Fatalf("a declared 200 MB body: %q", got)
	}

	// A chunked body that never ends: read up to the cap, then 413 and the connection closes.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	body := &endless{}
	resp, text := mcpPost(t, hs.URL(), io.MultiReader(strings.NewReader(initializeBody[:len(initializeBody)-1]+`,"pad":"`), body), nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(text, "8388608") {
		t.Fatalf("an endless chunked body: %d %s", resp.StatusCode, text)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 4<<20 {
		t.Fatalf("the heap grew by %d bytes after a refused body", grown)
	}

	// A configured cap: 1 KiB refuses a 2 KiB initialize, a small one is still 200.
	small := listen(t, "", mcpserver.WithMaxBodyBytes(1024))
	big := strings.Replace(initializeBody, `"name":"t"`, `"name":"`+strings.Repeat("t", 2048)+`"`, 1)
	if resp, text := mcpPost(t, small.URL(), strings.NewReader(big), nil); resp.StatusCode != 413 || !strings.Contains(text, "mcp_max_body_bytes") {
		t.Fatalf("2 KiB with a 1 KiB cap: %d %s", resp.StatusCode, text)
	}
	if resp, text := mcpPost(t, small.URL(), strings.NewReader(initializeBody), nil); resp.StatusCode != 200 {
		t.Fatalf("a small initialize: %d %s", resp.StatusCode, text)
	}
	e, _ := engine.Open(context.Background(), engine.Config{})
	defer e.Close(context.Background())
	if _, err := mcpserver.New(e).ListenHTTP("127.0.0.1:0", "", mcpserver.WithMaxBodyBytes(-1)); err == nil ||
		!strings.Contains(err.Error(), "mcp_max_body_bytes") {
		t.Fatalf("a negative cap: %v", err)
	}
}

// TestRedteamMCPForeignOrigin: a request with an Origin that is neither the server's own nor
// allowed is 403 forbidden_origin (the MCP transport spec: servers must validate Origin); no
// Origin, the server's own and an allowed one pass. Before the fix http://evil.example got 200.
func TestRedteamMCPForeignOrigin(t *testing.T) {
	hs := listen(t, "")
	for _, origin := range []string{"http://evil.example", "null", "http://127.0.0.1:1", "https://evil.example:443"} {
		resp, text := mcpPost(t, hs.URL(), strings.NewReader(initializeBody), map[string]string{"Origin": origin})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(text, "forbidden_origin") || !strings.Contains(text, "allowed_origins") {
			t.Fatalf("Origin %s: %d %s", origin, resp.StatusCode, text)
		}
	}
	for _, origin := range []string{"", "http://" + hs.Addr(), "HTTP://" + strings.ToUpper(hs.Addr())} {
		h := map[string]string{}
		if origin != "" {
			h["Origin"] = origin
		}
		if resp, text := mcpPost(t, hs.URL(), strings.NewReader(initializeBody), h); resp.StatusCode != 200 {
			t.Fatalf("Origin %q: %d %s", origin, resp.StatusCode, text)
		}
	}

	allowed := listen(t, "s3cret", mcpserver.WithAllowedOrigins("https://studio-tools.example"))
	auth := map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://studio-tools.example"}
	if resp, text := mcpPost(t, allowed.URL(), strings.NewReader(initializeBody), auth); resp.StatusCode != 200 ||
		resp.Header.Get("Access-Control-Allow-Origin") != "https://studio-tools.example" {
		t.Fatalf("an allowed origin: %d %v %s", resp.StatusCode, resp.Header, text)
	}
	auth["Origin"] = "https://other.example"
	if resp, _ := mcpPost(t, allowed.URL(), strings.NewReader(initializeBody), auth); resp.StatusCode != 403 {
		t.Fatalf("an origin not in the list: %d", resp.StatusCode)
	}
	// The browser's preflight carries no token: an allowed origin gets its CORS answer.
	req, _ := http.NewRequest(http.MethodOptions, allowed.URL(), nil)
	req.Header.Set("Origin", "https://studio-tools.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 || resp.Header.Get("Access-Control-Allow-Origin") != "https://studio-tools.example" {
		t.Fatalf("preflight of an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}

	e, _ := engine.Open(context.Background(), engine.Config{})
	defer e.Close(context.Background())
	for _, bad := range []string{"evil.example", "http://x.example/path", "ftp://x.example", ""} {
		if _, err := mcpserver.New(e).ListenHTTP("127.0.0.1:0", "", mcpserver.WithAllowedOrigins(bad)); err == nil ||
			!strings.Contains(err.Error(), "allowed_origins") {
			t.Fatalf("allowed origin %q: %v", bad, err)
		}
	}
}

// TestRedteamMCPSlowBody: a client that sends its headers and then a byte now and then is cut
// off after the body timeout instead of holding a handler forever, while a well-formed client
// is answered meanwhile.
func TestRedteamMCPSlowBody(t *testing.T) {
	hs := listen(t, "", mcpserver.WithBodyTimeout(300*time.Millisecond))
	conn, err := net.Dial("tcp", hs.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /mcp HTTP/1.1\r\nHost: "+hs.Addr()+"\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: "+strconv.Itoa(len(initializeBody))+"\r\n\r\n{")
	if resp, text := mcpPost(t, hs.URL(), strings.NewReader(initializeBody), nil); resp.StatusCode != 200 {
		t.Fatalf("a well-formed client beside a slow one: %d %s", resp.StatusCode, text)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(b), "HTTP/1.1 408") {
		t.Fatalf("a body that never completes: %q", b)
	}
	var reply map[string]any
	if i := strings.Index(string(b), "{"); i < 0 || json.Unmarshal(b[i:], &reply) != nil || reply["error"] != "request_timeout" {
		t.Fatalf("the 408 body: %q", b)
	}
}

func initialize(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(initializeBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
}

// TestRedteamMCPAbandonedSessions: sessions that clients open and abandon (initialize, no
// DELETE) are capped and ended by the server, so the heap comes back; a session with a GET
// stream open is never ended while it is open. Before the fix each abandoned session kept
// about 10 KB for the life of the server (2,000 initializes: +20 MB).
func TestRedteamMCPAbandonedSessions(t *testing.T) {
	hs := listen(t, "", mcpserver.WithMaxSessions(100), mcpserver.WithSessionIdleTimeout(time.Second))
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer c.CloseIdleConnections()
	// A session kept alive by its GET stream.
	_, keep := initialize(t, c, hs.URL())
	getReq, _ := http.NewRequest(http.MethodGet, hs.URL(), nil)
	getReq.Header.Set("Accept", "text/event-stream")
	getReq.Header.Set("Mcp-Session-Id", keep)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := http.DefaultClient.Do(getReq.WithContext(ctx))
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("GET stream: %v %v", err, stream)
	}
	defer stream.Body.Close()

	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	base := m.HeapAlloc
	for i := range 2000 {
		if code, id := initialize(t, c, hs.URL()); code != 200 || id == "" {
			t.Fatalf("initialize %d: %d", i, code)
		}
	}
	if n := hs.Sessions(); n > 100 {
		t.Fatalf("%d sessions open; the cap is 100", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for hs.Sessions() > 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := hs.Sessions(); n != 1 {
		t.Fatalf("%d sessions still open after the idle timeout; want the streaming one only", n)
	}
	runtime.GC()
	runtime.ReadMemStats(&m)
	if grown := int64(m.HeapAlloc) - int64(base); grown > 3<<20 {
		t.Fatalf("the heap grew by %d bytes after 2,000 abandoned sessions ended", grown)
	}
	// The streaming session still works.
	resp, text := mcpPost(t, hs.URL(), strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`), map[string]string{"Mcp-Session-Id": keep})
	if resp.StatusCode != 200 || !strings.Contains(text, `"result"`) {
		t.Fatalf("ping on the streaming session: %d %s", resp.StatusCode, text)
	}

	// Full of sessions in use: a new one is 503 too_many_sessions, not an eviction.
	full := listen(t, "", mcpserver.WithMaxSessions(2))
	for range 2 {
		_, id := initialize(t, c, full.URL())
		if resp, _ := mcpPost(t, full.URL(), strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), map[string]string{"Mcp-Session-Id": id}); resp.StatusCode >= 300 {
			t.Fatalf("initialized: %d", resp.StatusCode)
		}
	}
	if code, _ := initialize(t, c, full.URL()); code != http.StatusServiceUnavailable {
		t.Fatalf("a third session over a cap of 2 in use: %d", code)
	}
}

// Issue #33 item 3, for MCP over HTTP: a weak token is refused off loopback, and wrong bearer
// tokens are throttled per client address (429 with Retry-After), the right one from the same
// address too while it waits.
func TestRedteamMCPTokenStrengthAndThrottle(t *testing.T) {
	e, err := engine.Open(context.Background(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	for _, weak := range []string{" ", "\n", "a", "aaaaaaaaaaaaaaaaaaaaaa"} {
		if hs, err := mcpserver.New(e).ListenHTTP("0.0.0.0:0", weak); err == nil {
			_ = hs.Close(context.Background())
			t.Fatalf("token %q accepted off loopback", weak)
		} else if !strings.Contains(err.Error(), "weak token") {
			t.Errorf("token %q: %v", weak, err)
		}
	}
	const token = "rT7-q9vXk2LmZ0pWs4Ya"
	hs := listen(t, token)
	url := "http://" + hs.Addr() + "/mcp"
	codes := []int{}
	for range 8 {
		resp, _ := mcpPost(t, url, strings.NewReader(initializeBody), map[string]string{"Authorization": "Bearer guess"})
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != http.StatusUnauthorized || codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Fatalf("wrong tokens answered %v; want 401 first, 429 once throttled", codes)
	}
	resp, _ := mcpPost(t, url, strings.NewReader(initializeBody), map[string]string{"Authorization": "Bearer " + token})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the right token from the throttled address: %d (Retry-After %q); want 429 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
