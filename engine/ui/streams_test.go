package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// waitSubscriptions waits until the engine has want open subscriptions.
func waitSubscriptions(t *testing.T, e *engine.Engine, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for e.OpenSubscriptions() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d open subscriptions after %s, want %d", e.OpenSubscriptions(), within, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openStream sends GET /api/events?query on a raw connection and reads the answer's head and
// the stream's first comment; it returns the connection.
func openStream(t *testing.T, addr, query string, dial func(string) (net.Conn, error)) net.Conn {
	t.Helper()
	c, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /api/events%s HTTP/1.1\r\nHost: %s\r\n\r\n", query, addr)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("events%s: %v", query, err)
		}
		if strings.HasPrefix(line, ": dcc-flow events from") {
			return c
		}
	}
}

// Event streams that end abruptly (closed, or half-closed by the client) release their engine
// subscription: the count goes back to 0.
func TestEventStreamsReleaseTheirSubscriptionsWhenClientsLeave(t *testing.T) {
	b := newBench(t, ui.Options{Coalesce: 10 * time.Millisecond})
	id := b.submit(t, "slow", nil)
	addr := strings.TrimPrefix(b.srv.URL, "http://")
	dial := func(a string) (net.Conn, error) { return net.Dial("tcp", a) }
	var conns []net.Conn
	for i := range 20 {
		q := ""
		if i%2 == 1 {
			q = "?run=" + id
		}
		conns = append(conns, openStream(t, addr, q, dial))
	}
	waitSubscriptions(t, b.e, 20, 5*time.Second)
	for i, c := range conns {
		if i%4 == 0 {
			_ = c.(*net.TCPConn).CloseWrite() // half-closed: the client says it is done
			defer c.Close()
		} else {
			_ = c.Close()
		}
	}
	waitSubscriptions(t, b.e, 0, 5*time.Second)
}

// A client that opens the stream and never reads it is cut after WriteTimeout once the
// socket buffers are full: it does not hold the handler and its subscription forever.
func TestEventStreamCutsAClientThatStopsReading(t *testing.T) {
	e := newEngine(t, filepath.Join(t.TempDir(), "flow.db"))
	if err := e.Register(mustSpec(t, bigForeach(3000))); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(ui.Handler(e, ui.Options{Coalesce: 5 * time.Millisecond, WriteTimeout: 300 * time.Millisecond}))
	// Small server send buffers: a few KiB fill them (the kernel's defaults are MiBs).
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	dial := func(a string) (net.Conn, error) {
		d := net.Dialer{}
		c, err := d.Dial("tcp", a)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	}
	id, err := e.Submit(context.Background(), engine.StartRequest{Workflow: "big"})
	if err != nil {
		t.Fatal(err)
	}
	c := openStream(t, addr, "?run="+id+"&from=1", dial) // every step message since the start
	defer c.Close()
	waitSubscriptions(t, e, 1, 5*time.Second)
	// The run writes MiBs of step messages; the client reads none of them.
	waitSubscriptions(t, e, 0, 20*time.Second)
	if info, err := e.Status(context.Background(), id); err != nil || info.Status == run.StatusFailed {
		t.Fatalf("the run: %v %v", info, err)
	}
}

type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// The server's ReadTimeout does not end an event stream (a guard: Serve sets one, 60 s, and a
// page stays open for hours).
func TestEventStreamOutlivesTheServersReadTimeout(t *testing.T) {
	e := newEngine(t, filepath.Join(t.TempDir(), "flow.db"))
	srv := httptest.NewUnstartedServer(ui.Handler(e, ui.Options{Heartbeat: 50 * time.Millisecond}))
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	res, err := http.Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	start := time.Now()
	beats := 0
	for sc.Scan() && time.Since(start) < 1500*time.Millisecond {
		if sc.Text() == ": heartbeat" {
			beats++
		}
	}
	if elapsed := time.Since(start); elapsed < 1500*time.Millisecond {
		t.Fatalf("the stream ended after %s (%d heartbeats), ReadTimeout 300ms: %v", elapsed, beats, sc.Err())
	}
	if beats < 10 {
		t.Fatalf("%d heartbeats in 1.5 s at a 50 ms interval", beats)
	}
}

// An action's body over the cap is refused 413 too_large, not read whole.
func TestActionBodyOverTheCapIs413(t *testing.T) {
	b := newBench(t, ui.Options{})
	id := b.submit(t, "slow", nil)
	code, out, _ := b.do(t, http.MethodPost, "/api/runs/"+id+"/cancel", map[string]any{"by": "ana", "reason": strings.Repeat("x", 100<<10)})
	if code != http.StatusRequestEntityTooLarge || errorCode(out) != run.CodeTooLarge {
		t.Fatalf("100 KiB body: %d %s", code, out)
	}
	b.post(t, "/api/runs/"+id+"/cancel", map[string]any{"by": "ana", "reason": "small"}, http.StatusOK)
}

// A known API route asked with a method it does not answer is 405 with Allow (not 404), and
// an unknown route stays 404.
func TestAPIWrongMethodIs405(t *testing.T) {
	b := newBench(t, ui.Options{})
	for _, c := range []struct {
		method, path, allow string
		want                int
	}{
		{http.MethodDelete, "/api/runs", "GET, HEAD, POST", http.StatusMethodNotAllowed},
		{http.MethodPut, "/api/runs/r-1/cancel", "POST", http.StatusMethodNotAllowed},
		{http.MethodGet, "/api/runs/r-1/cancel", "POST", http.StatusMethodNotAllowed},
		{http.MethodPost, "/api/events", "GET, HEAD", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/api/nope", "", http.StatusNotFound},
	} {
		code, out, hd := b.do(t, c.method, c.path, nil)
		if code != c.want || hd.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q %s, want %d Allow %q", c.method, c.path, code, hd.Get("Allow"), out, c.want, c.allow)
		}
	}
}
