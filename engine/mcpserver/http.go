package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// DefaultHTTPAddr is where ListenHTTP listens when no address is given.
const DefaultHTTPAddr = "127.0.0.1:8765"

// Handler returns the streamable HTTP handler (endpoint /mcp) with the default limits
// (HTTPHandler with no options). With a non-empty token every request needs
// `Authorization: Bearer <token>` (401 otherwise). A session, and its resource subscriptions,
// lasts until the client ends it (HTTP DELETE); ListenHTTP's Close also ends every session, a
// bare Handler does not.
func (s *Server) Handler(token string) http.Handler {
	h, _ := s.handler(token, nil)
	return h
}

// HTTPHandler is Handler with options (WithMaxBodyBytes, WithAllowedOrigins, WithBodyTimeout,
// WithMaxSessions, WithSessionIdleTimeout, WithMetrics). An option with an invalid value is an error with
// code invalid_request naming the option. A bare handler caps the sessions but does not end
// idle ones (ListenHTTP does).
func (s *Server) HTTPHandler(token string, opts ...HTTPOption) (http.Handler, error) {
	h, err := s.handler(token, opts)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// httpHandler is the transport's handler: the checks, then mcp-go's streamable server.
type httpHandler struct {
	http.Handler
	mcp      *server.StreamableHTTPServer
	sessions *sessionTracker
}

// handler returns the HTTP handler and the streamable server under it; extra are added to
// mcp-go's options. Checks, in order: Origin (403 forbidden_origin), the bearer token (401),
// the body size (413 payload_too_large) and time (408 request_timeout); then mcp-go, which
// refuses a foreign Host on a loopback connection (403, DNS rebinding).
func (s *Server) handler(token string, opts []HTTPOption, extra ...server.StreamableHTTPOption) (*httpHandler, error) {
	cfg, err := newHTTPConfig(opts)
	if err != nil {
		return nil, err
	}
	mopts := []server.StreamableHTTPOption{
		server.WithEndpointPath("/mcp"), server.WithStateful(true),
		// mcp-go logs transport trouble (a client gone mid-stream) to slog.Default, i.e. stderr,
		// which is the host's (a DCC's console, a stdio MCP peer): this package writes nowhere.
		server.WithStreamableHTTPLogger(slog.New(slog.DiscardHandler)),
	}
	if len(cfg.origins) > 0 || cfg.anyOrigin {
		// The allowed origins get their CORS answers, so that a browser page on one can call.
		mopts = append(mopts, server.WithStreamableHTTPCORS(server.WithCORSAllowedOrigins(cfg.cors...)))
	}
	h := server.NewStreamableHTTPServer(s.mcp, append(mopts, extra...)...)
	throttle := httpauth.NewThrottle(time.Now) // wrong bearer tokens, per client address
	sessions := newSessionTracker(h, cfg)
	return &httpHandler{mcp: h, sessions: sessions, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !cfg.originAllowed(origin, r.Host) {
			httpError(w, http.StatusForbidden, "forbidden_origin", fmt.Sprintf(
				"Origin %q is neither this server's own nor in allowed_origins; to let a browser page on it call this server, add it to allowed_origins (dcc-flow serve --allowed-origin %s)",
				origin, origin))
			return
		}
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" && len(cfg.cors) > 0
		if token != "" && !preflight {
			if ok, wait := throttle.Bearer(r, token); wait > 0 {
				w.Header().Set("Retry-After", httpauth.RetryAfter(wait))
				httpError(w, http.StatusTooManyRequests, "too_many_attempts", fmt.Sprintf(
					"too many wrong tokens from this address: try again in %s s (docs/reference/limits.md)", httpauth.RetryAfter(wait)))
				return
			} else if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="dcc-flow"`)
				httpError(w, http.StatusUnauthorized, "unauthorized", "a bearer token is required")
				return
			}
		}
		if cfg.metrics != nil && r.URL.Path == "/metrics" {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				httpError(w, http.StatusMethodNotAllowed, "method_not_allowed", "/metrics answers GET")
				return
			}
			cfg.metrics.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && !cfg.readBody(w, r) {
			return
		}
		sid := r.Header.Get("Mcp-Session-Id")
		if sid != "" {
			sessions.begin(sid)
			defer sessions.end(sid, r.Method == http.MethodDelete)
		} else if r.Method == http.MethodPost && !sessions.admit() {
			w.Header().Set("Retry-After", "30")
			httpError(w, http.StatusServiceUnavailable, "too_many_sessions", fmt.Sprintf(
				"%d MCP sessions are open, the limit (mcp_max_sessions); end unused sessions with DELETE, or retry later", cfg.maxSessions))
			return
		}
		if r.Method == http.MethodPost {
			w = &suggestResponseWriter{ResponseWriter: w, fix: s.suggestUnknownTool}
		}
		h.ServeHTTP(w, r)
		if sid == "" && r.Method == http.MethodPost {
			if id := w.Header().Get("Mcp-Session-Id"); id != "" {
				sessions.opened(id)
			}
		}
	})}, nil
}

// Defaults and ranges of the HTTP transport's limits.
const (
	// DefaultMaxBodyBytes caps an MCP request body (8 MiB); WithMaxBodyBytes changes it within
	// [1 KiB, MaxMaxBodyBytes].
	DefaultMaxBodyBytes int64 = 8 << 20
	MinMaxBodyBytes     int64 = 1 << 10
	MaxMaxBodyBytes     int64 = 1 << 30
	// DefaultBodyTimeout bounds the reading of one request body (from the end of its headers).
	DefaultBodyTimeout = 30 * time.Second
	// ReadHeaderTimeout bounds the reading of a request's headers; MaxHeaderBytes their size.
	ReadHeaderTimeout = 10 * time.Second
	MaxHeaderBytes    = 64 << 10
	// IdleTimeout closes a keep-alive connection with no request for that long.
	IdleTimeout = 120 * time.Second
)

// HTTPOption configures the streamable HTTP transport (HTTPHandler, ListenHTTP).
type HTTPOption func(*httpConfig)

// WithMaxBodyBytes caps request bodies at n bytes (0 = DefaultMaxBodyBytes; else within
// [MinMaxBodyBytes, MaxMaxBodyBytes]). A larger body is answered 413 payload_too_large: at once
// when its Content-Length says so, else once n bytes were read; the connection is closed.
func WithMaxBodyBytes(n int64) HTTPOption {
	return func(c *httpConfig) {
		switch {
		case n == 0:
		case n < MinMaxBodyBytes || n > MaxMaxBodyBytes:
			c.problems = append(c.problems, fmt.Sprintf("mcp_max_body_bytes is %d; use 0 for the default (%d) or a value from %d to %d",
				n, DefaultMaxBodyBytes, MinMaxBodyBytes, MaxMaxBodyBytes))
		default:
			c.maxBody = n
		}
	}
}

// WithAllowedOrigins lets requests whose Origin is one of origins through, besides requests with
// no Origin and those whose Origin is the server's own (its Host): every other Origin is
// answered 403 forbidden_origin. Each origin is "http://host[:port]" or "https://host[:port]",
// with no path, or "*" for any origin. Allowed origins also get CORS answers.
func WithAllowedOrigins(origins ...string) HTTPOption {
	return func(c *httpConfig) {
		for i, o := range origins {
			if o == "*" {
				c.anyOrigin = true
				c.cors = append(c.cors, o)
				continue
			}
			n, ok := normOrigin(o)
			if !ok {
				c.problems = append(c.problems, fmt.Sprintf(
					"allowed_origins[%d] %q is not an origin; write scheme://host[:port] with http or https and no path, e.g. \"https://tools.studio.example\", or \"*\"", i, o))
				continue
			}
			c.origins[n] = true
			c.cors = append(c.cors, o)
		}
	}
}

// WithBodyTimeout bounds the reading of each request body (0 = DefaultBodyTimeout): a body not
// received in time is answered 408 request_timeout and the connection closed. It does not
// bound the responses, so a GET stream (server-to-client notifications) lasts as long as the
// client keeps it.
func WithBodyTimeout(d time.Duration) HTTPOption {
	return func(c *httpConfig) {
		if d < 0 {
			c.problems = append(c.problems, fmt.Sprintf("the MCP body timeout is %v; use 0 for the default (%v) or a positive duration", d, DefaultBodyTimeout))
		} else if d > 0 {
			c.bodyTimeout = d
		}
	}
}

// WithMetrics also serves h (the engine's Metrics, docs/operations/metrics.md) on GET /metrics, behind
// the same token and Origin checks as /mcp; another method there is answered 405.
func WithMetrics(h http.Handler) HTTPOption { return func(c *httpConfig) { c.metrics = h } }

type httpConfig struct {
	metrics     http.Handler // WithMetrics; nil = /metrics is not served
	maxSessions int
	idle        time.Duration
	maxBody     int64
	bodyTimeout time.Duration
	origins     map[string]bool // normalised allowed origins
	anyOrigin   bool
	cors        []string // the allowed origins as given, for mcp-go's CORS answers
	problems    []string
}

func newHTTPConfig(opts []HTTPOption) (*httpConfig, error) {
	c := &httpConfig{maxBody: DefaultMaxBodyBytes, bodyTimeout: DefaultBodyTimeout, origins: map[string]bool{},
		maxSessions: DefaultMaxSessions, idle: DefaultSessionIdleTimeout}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if len(c.problems) > 0 {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: "invalid MCP HTTP options: " + strings.Join(c.problems, "; "),
			Details: map[string]any{"problems": c.problems}}
	}
	return c, nil
}

// originAllowed reports whether a request with this Origin header to host (the request's Host)
// may go on: the origin is allowed, or it names host itself (scheme http or https).
func (c *httpConfig) originAllowed(origin, host string) bool {
	if c.anyOrigin {
		return true
	}
	n, ok := normOrigin(origin)
	if !ok {
		return false
	}
	if c.origins[n] {
		return true
	}
	scheme, hostport, _ := strings.Cut(n, "://")
	return host != "" && hostport == normHostPort(scheme, host)
}

// normOrigin returns "scheme://host[:port]" in lower case without the scheme's default port,
// or false when o is not an http(s) origin.
func normOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	return u.Scheme + "://" + normHostPort(u.Scheme, u.Host), true
}

func normHostPort(scheme, hostport string) string {
	hostport = strings.ToLower(hostport)
	if scheme == "http" {
		return strings.TrimSuffix(hostport, ":80")
	}
	return strings.TrimSuffix(hostport, ":443")
}

// readBody reads the body of a POST within the size and time limits and puts it back in r for
// mcp-go (which reads whole bodies). It answers the request and returns false on a failure.
func (c *httpConfig) readBody(w http.ResponseWriter, r *http.Request) bool {
	tooLarge := func() bool {
		w.Header().Set("Connection", "close")
		httpError(w, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf(
			"the request body is larger than the limit of %d bytes; send less, or raise mcp_max_body_bytes (dcc-flow serve --mcp-max-body-bytes)", c.maxBody))
		return false
	}
	if r.ContentLength > c.maxBody {
		return tooLarge()
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(c.bodyTimeout)) // unsupported by a test recorder: no bound
	body, err := readCapped(http.MaxBytesReader(w, r.Body, c.maxBody), r.ContentLength, c.maxBody)
	if err != nil {
		// The server discards what is left of a body before closing: no waiting for it.
		_ = rc.SetReadDeadline(time.Now())
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return tooLarge()
		}
		w.Header().Set("Connection", "close")
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			httpError(w, http.StatusRequestTimeout, "request_timeout", fmt.Sprintf("the request body did not arrive within %v", c.bodyTimeout))
			return false
		}
		httpError(w, http.StatusBadRequest, "invalid_body", "reading the request body failed: "+err.Error())
		return false
	}
	_ = rc.SetReadDeadline(time.Time{}) // the response (a stream, maybe) is not bounded
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return true
}

// readCapped reads rd to its end into a buffer that grows with what arrives (from 64 KiB, not
// from what the client claims) and never beyond limit+1 bytes, so that a refused body costs at
// most about twice the limit in garbage.
func readCapped(rd io.Reader, declared, limit int64) ([]byte, error) {
	size := min(max(declared+1, 512), 64<<10, limit+1)
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*int64(cap(buf)), limit+1))
			if cap(grown) == len(buf) {
				grown = make([]byte, len(buf), len(buf)+512) // at the limit: room to see one byte more
			}
			copy(grown, buf)
			buf = grown
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// httpError answers status with {"error": code, "message": message}.
func httpError(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(map[string]string{"error": code, "message": message})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// HTTPServer is a running streamable HTTP MCP server.
type HTTPServer struct {
	mcp      *server.StreamableHTTPServer // knows the http.Server (WithStreamableHTTPServer)
	sessions *sessionTracker
	ln       net.Listener
	addr     string
}

// Sessions is the number of MCP sessions open.
func (h *HTTPServer) Sessions() int { return h.sessions.len() }

// Addr is the listening address, e.g. "127.0.0.1:8765"; the endpoint is http://Addr/mcp.
func (h *HTTPServer) Addr() string { return h.addr }

// URL is the MCP endpoint.
func (h *HTTPServer) URL() string { return "http://" + h.addr + "/mcp" }

// Close stops the server: it ends every MCP session (their GET streams and resource
// subscriptions, so no notification follows), including sessions that requests in progress
// open meanwhile, and waits for those requests or until ctx ends (mcp-go's Shutdown).
func (h *HTTPServer) Close(ctx context.Context) error {
	h.sessions.close()
	err := h.mcp.Shutdown(ctx)
	// Shutdown closes only the listeners Serve has taken: one whose goroutine has not entered
	// Serve yet would be closed by Serve later, accepting connections after Close returned.
	_ = h.ln.Close()
	h.mcp.CloseSessions(ctx) // one that the last request in progress opened
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ListenHTTP serves streamable HTTP on addr ("" = DefaultHTTPAddr; port 0 picks one), with the
// options of HTTPHandler. Binding an address that is not loopback without a token is refused
// (code invalid_request), and so are invalid options. Headers must arrive within
// ReadHeaderTimeout and fit in MaxHeaderBytes; bodies within the body timeout; an idle
// keep-alive connection is closed after IdleTimeout. Responses have no time limit: a GET stream
// lasts while the client keeps it.
func (s *Server) ListenHTTP(addr, token string, opts ...HTTPOption) (*HTTPServer, error) {
	if addr == "" {
		addr = DefaultHTTPAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("mcp address %q: %v", addr, err)}
	}
	if !isLoopback(host) && token == "" {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("binding %s requires a bearer token; serve on 127.0.0.1 or give a token", addr)}
	}
	if !isLoopback(host) {
		if err := httpauth.CheckToken("MCP", addr, token); err != nil {
			return nil, &run.Error{Code: run.CodeInvalidRequest, Message: err.Error()}
		}
	}
	srv := &http.Server{ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
	// The streamable server knows srv so that its Shutdown stops it after closing the sessions.
	handler, err := s.handler(token, opts, server.WithStreamableHTTPServer(srv))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("cannot listen for MCP on %s: %v", addr, err), Err: err}
	}
	srv.Handler = handler
	hs := &HTTPServer{mcp: handler.mcp, sessions: handler.sessions, ln: ln, addr: ln.Addr().String()}
	go handler.sessions.run()
	go func() { _ = srv.Serve(ln) }()
	return hs, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
