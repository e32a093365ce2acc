package remote

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

const (
	// connectTimeout bounds starting a connection: spawning the child or reaching the URL,
	// and the initialize handshake.
	connectTimeout = 30 * time.Second
	// cancelNoticeTimeout bounds sending one notifications/cancelled over HTTP. (The stdio
	// reminders of remindCancel pass it too, but mcp-go's stdio transport checks it only before
	// writing: a worker that stops reading holds a reminder until KillAfter kills it.)
	cancelNoticeTimeout = 5 * time.Second
	// protocolVersion is the MCP revision the client asks for. mcp-go v1.2.1 would first
	// probe for the stateless 2026-07-28 revision (server/discover); we stay on the
	// initialize handshake, which every server deployed in studios speaks, and on which
	// notifications/cancelled is defined for both transports.
	protocolVersion = mcp.ProtocolVersion20251125
)

// conn is one initialized MCP client for a remote: a child process (stdio) or an HTTP
// endpoint. Calls on it run concurrently.
type conn struct {
	client *client.Client
	proc   *process        // stdio only
	httpT  *http.Transport // HTTP only
	notes  tracker         // notifications/cancelled being sent (HTTP)
	settle *settler        // pool workers only: tools/call requests not answered yet
	broken atomic.Bool
	// tooLarge is set (with broken) when the stdio child wrote a line over the message size
	// limit, and was killed for it: the calls it was serving fail with kind too_large.
	tooLarge atomic.Bool
	once     sync.Once
}

// dead reports whether the connection must not be used again.
func (c *conn) dead() bool {
	return c.broken.Load() || (c.proc != nil && c.proc.hasExited())
}

// close ends the connection: it lets pending cancellation notices go out, closes the client
// (HTTP: deletes the session; stdio: closes the child's stdin) and stops the child. Safe to
// call more than once.
func (c *conn) close() {
	c.once.Do(func() {
		c.broken.Store(true)
		c.notes.closeAndWait()
		_ = c.client.Close()
		if c.proc != nil {
			c.proc.stop()
		}
		if c.httpT != nil {
			c.httpT.CloseIdleConnections()
		}
	})
}

// describe adds what is known about a stdio child's exit to a transport failure message.
func (c *conn) describe(err error) string {
	if c.proc != nil {
		if exit := c.proc.describeExit(); exit != "" {
			return fmt.Sprintf("%v: %s", err, exit)
		}
	}
	return err.Error()
}

// connect makes and initializes a connection for cfg. life is the pool's lifetime context;
// ctx bounds the handshake, limit being its length for messages; environ is the environment
// (Pool.environ); maxMsg bounds each message the remote sends (maxMessageBytes): a stdio child
// that writes a longer line is killed, an HTTP body past it fails the request.
func connect(life, ctx context.Context, cfg Config, environ func() []string, limit time.Duration, maxMsg int64) (*conn, error) {
	c := &conn{}
	var tr transport.Interface
	if cfg.URL != "" {
		t, err := newHTTPTransport(cfg, c, environ, maxMsg)
		if err != nil {
			return nil, err
		}
		tr = t
	} else {
		p, err := startProcess(cfg, environ())
		if err != nil {
			return nil, fmt.Errorf("%w: starting %q: %w", errDial, cfg.Command[0], err)
		}
		c.proc = p
		// mcp-go reads the child's stdout a line at a time with bufio.Reader.ReadString, which
		// buffers a line whole: the frameReader stops it at maxMsg bytes (io.EOF, which mcp-go
		// takes for the child's end, quietly) and kills the child at once.
		out := &frameReader{r: p.stdout, limit: maxMsg, framing: framesLines, overErr: io.EOF, over: func() {
			c.tooLarge.Store(true)
			c.broken.Store(true)
			p.kill()
		}}
		st := &stdioTransport{Stdio: transport.NewIO(out, p.stdin, nil)}
		if cfg.pooled() {
			c.settle = newSettler()
			st.s = c.settle
		}
		tr = st
	}
	c.client = client.NewClient(tr, client.WithProtocolVersion(protocolVersion))
	c.client.OnNotification(onNotification) // progress and logs of running calls (report.go)
	if err := c.client.Start(life); err != nil {
		c.close()
		return nil, fmt.Errorf("%w: %w", errDial, err)
	}
	_, err := c.client.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: protocolVersion,
		ClientInfo:      mcp.Implementation{Name: "dcc-flow", Version: clientVersion()},
	}})
	if err != nil {
		msg := c.describe(err)
		if c.tooLarge.Load() {
			msg = fmt.Sprintf("%v: the process wrote a message over %s (the limit on one message from a remote) and was killed", err, sizeText(maxMsg))
		}
		c.close()
		if ctx.Err() != nil && life.Err() == nil {
			tail := ""
			if c.proc != nil {
				if s := strings.TrimSpace(c.proc.stderr.String()); s != "" {
					tail = "; stderr: " + s
				}
			}
			return nil, fmt.Errorf("%w: no answer to initialize within %v%s", errDial, limit, tail)
		}
		return nil, fmt.Errorf("%w: initialize: %s: %w", errDial, msg, err)
	}
	return c, nil
}

// newHTTPTransport returns a streamable HTTP transport for cfg, with its own connection pool,
// the configured headers and the bearer token of cfg.TokenEnv read from environ, and
// notifications/cancelled for aborted calls.
func newHTTPTransport(cfg Config, c *conn, environ func() []string, maxMsg int64) (*cancellingHTTP, error) {
	headers := maps.Clone(cfg.Headers)
	if headers == nil {
		headers = map[string]string{}
	}
	if cfg.TokenEnv != "" {
		token := getenv(environ(), cfg.TokenEnv)
		if token == "" {
			return nil, &errMissingToken{env: cfg.TokenEnv}
		}
		headers["Authorization"] = "Bearer " + token
	}
	c.httpT = http.DefaultTransport.(*http.Transport).Clone()
	st, err := transport.NewStreamableHTTP(cfg.URL,
		transport.WithHTTPBasicClient(&http.Client{Transport: statusRecorder{base: c.httpT, limit: maxMsg}}),
		transport.WithHTTPHeaders(headers),
		transport.WithHTTPLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		return nil, err
	}
	return &cancellingHTTP{StreamableHTTP: st, notes: &c.notes}, nil
}

// getenv returns the value of the first "key=value" entry of env for key, "" when none.
func getenv(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// cancellingHTTP is mcp-go's streamable HTTP transport plus what its client leaves out over
// HTTP: when the context of a tools/call ends before the answer, it sends
// notifications/cancelled with the request id (in the background, bounded by
// cancelNoticeTimeout). mcp-go's client sends that notification itself only over stdio, and
// relies on the aborted HTTP request over HTTP, which a server only notices if it watches the
// request's connection. Every other method is the embedded transport's.
type cancellingHTTP struct {
	*transport.StreamableHTTP
	notes *tracker
}

func (t *cancellingHTTP) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	resp, err := t.StreamableHTTP.SendRequest(ctx, req)
	noteAnswer(ctx, req, resp, err)
	if err != nil && ctx.Err() != nil && req.Method == string(mcp.MethodToolsCall) {
		note := mcp.JSONRPCNotification{
			JSONRPC: mcp.JSONRPC_VERSION,
			Notification: mcp.Notification{
				Method: string(mcp.MethodNotificationCancelled),
				Params: mcp.NotificationParams{AdditionalFields: map[string]any{
					"requestId": req.ID,
					"reason":    context.Cause(ctx).Error(),
				}},
			},
		}
		t.notes.goTrack(func() {
			nctx, cancel := context.WithTimeout(context.Background(), cancelNoticeTimeout)
			defer cancel()
			_ = t.SendNotification(nctx, note)
		})
	}
	return resp, err
}

// tracker runs goroutines that close waits for. Unlike a bare WaitGroup, starting one after
// closeAndWait has begun is refused instead of racing with Wait.
type tracker struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	closing bool
}

// goTrack runs fn in a new goroutine unless closeAndWait was called; it reports whether it
// did.
func (t *tracker) goTrack(fn func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.wg.Go(fn)
	return true
}

// closeAndWait refuses new goroutines and waits for the running ones.
func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
	t.wg.Wait()
}

// clientVersion is the dcc-flow module version this binary was built from, for clientInfo.
func clientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Path == "github.com/dcc-flow/dcc-flow" && info.Main.Version != "" {
			return info.Main.Version
		}
		for _, dep := range info.Deps {
			if dep.Path == "github.com/dcc-flow/dcc-flow" {
				return dep.Version
			}
		}
	}
	return "(devel)"
}

var _ transport.HTTPConnection = (*cancellingHTTP)(nil)
