// Package ui is the web dashboard of dcc-flow (docs/guide/ui.md): an http.Handler over an
// *engine.Engine that serves the embedded single-page front-end (assets/, plain ES modules, no
// build step, no CDN), a JSON API under /api/ and a Server-Sent Events stream of run and step
// changes, with the security rules of docs/guide/ui.md: loopback needs no token; a token (required
// off loopback, at least httpauth.MinTokenLength characters there) is asked as a bearer header, or posted
// once to /login for a session (random, in memory, expiring, ended by POST /api/logout); wrong
// tokens are throttled per client address; every POST carries a CSRF header (the session's
// value, or a double-submit cookie) and a matching Origin.
package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

//go:embed assets
var assetsFS embed.FS

// DefaultAddr is where dcc-flow serve --ui listens when the address is only a port.
const DefaultAddr = "127.0.0.1:8780"

// Defaults of Options.
const (
	DefaultCoalesce  = 250 * time.Millisecond
	DefaultHeartbeat = 15 * time.Second
	// DefaultWriteTimeout bounds each write of an event stream: a client that stops reading
	// for that long (its socket buffers full) is disconnected.
	DefaultWriteTimeout = 10 * time.Second
	DefaultPageSize     = 50
	MaxPageSize         = 500
	maxBodyBytes        = 64 << 10
)

// Options configure Handler and Serve.
type Options struct {
	// Token, when not "", is required on every /api/ request: `Authorization: Bearer TOKEN` or
	// the session cookie that POST /login (form field token) sets. Required on an address that
	// is not loopback, where Serve refuses one shorter than httpauth.MinTokenLength.
	Token string
	// SessionIdle ends a session unused that long; 0 = DefaultSessionIdle (12 h).
	SessionIdle time.Duration
	// SessionMax ends a session that long after its sign-in; 0 = DefaultSessionMax (7 days).
	SessionMax time.Duration
	// Now is the clock of sessions and throttling (for tests); nil = time.Now.
	Now func() time.Time
	// Metrics, when not nil, is mounted at /metrics (behind the same token rule as /api/).
	Metrics http.Handler
	// Coalesce is the shortest interval between two SSE messages about the same run (or the
	// same step instance); 0 = DefaultCoalesce.
	Coalesce time.Duration
	// Heartbeat is the interval of the SSE keep-alive comment; 0 = DefaultHeartbeat.
	Heartbeat time.Duration
	// WriteTimeout bounds each write (and flush) of an event stream; 0 = DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// Handler returns the dashboard's handler over e. Without a token it answers only requests
// whose Host is a loopback name or address (403 otherwise, so a DNS-rebinding page cannot
// reach it); with one, every /api/ request must carry it.
func Handler(e *engine.Engine, opts Options) http.Handler { return newHandler(e, opts) }

func newHandler(e *engine.Engine, opts Options) *handler {
	if opts.Coalesce <= 0 {
		opts.Coalesce = DefaultCoalesce
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.SessionIdle <= 0 {
		opts.SessionIdle = DefaultSessionIdle
	}
	if opts.SessionMax <= 0 {
		opts.SessionMax = DefaultSessionMax
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	assets, _ := fs.Sub(assetsFS, "assets") // cannot fail: the directory is embedded
	h := &handler{e: e, opts: opts, assets: assets, toggles: map[string]toggle{}, stop: make(chan struct{}),
		sessions: newSessionTable(opts.SessionIdle, opts.SessionMax, opts.Now), throttle: httpauth.NewThrottle(opts.Now)}
	h.mux = http.NewServeMux()
	h.routes()
	return h
}

type handler struct {
	e      *engine.Engine
	opts   Options
	assets fs.FS
	mux    *http.ServeMux

	mu      sync.Mutex
	toggles map[string]toggle // schedule id → the last enable/disable from the dashboard

	sessions *sessionTable      // signed-in browsers (POST /login)
	throttle *httpauth.Throttle // wrong tokens per client address

	stop     chan struct{} // closed by Server.Close: event streams end
	stopOnce sync.Once
}

func (h *handler) shutdown() { h.stopOnce.Do(func() { close(h.stop) }) }

// toggle records who last enabled or disabled a schedule from the dashboard.
type toggle struct {
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Enabled bool      `json:"enabled"`
}

// Server is a running dashboard (Serve).
type Server struct {
	h    *handler
	srv  *http.Server
	ln   net.Listener
	addr string
	done chan struct{}
}

// Serve starts the dashboard on addr (HOST:PORT; port 0 picks a free port). An address that is
// not loopback without opts.Token, or with a weak one (checkToken: under httpauth.MinTokenLength
// characters, under 5 different ones, control characters), is refused with code invalid_input
// (naming --token-file and how to generate a token), and so
// is an address that does not parse or cannot be bound. Headers must arrive within 10 s and
// fit in 64 KiB; responses have no time limit (the event stream lasts while the page is open).
// Stop it with Close.
func Serve(e *engine.Engine, addr string, opts Options) (*Server, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidInput, Message: fmt.Sprintf("ui address %q: %v; write HOST:PORT, e.g. %s", addr, err, DefaultAddr)}
	}
	if !isLoopbackHost(host) && opts.Token == "" {
		return nil, &run.Error{Code: run.CodeInvalidInput, Message: fmt.Sprintf(
			"refusing to serve the dashboard on %s, which is not a loopback address, without a token: anyone who can reach the port could cancel and approve runs; "+
				"give one with --token-file or DCCFLOW_TOKEN (token in the Python and C APIs), or serve on 127.0.0.1", addr)}
	}
	if !isLoopbackHost(host) {
		if err := httpauth.CheckToken("the dashboard", addr, opts.Token); err != nil {
			return nil, &run.Error{Code: run.CodeInvalidInput, Message: err.Error()}
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidInput, Message: fmt.Sprintf("cannot listen for the dashboard on %s: %v", addr, err), Err: err}
	}
	h := newHandler(e, opts)
	s := &Server{
		h: h,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
			IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
		ln: ln, addr: ln.Addr().String(), done: make(chan struct{}),
	}
	go func() {
		_ = s.srv.Serve(ln)
		close(s.done)
	}()
	return s, nil
}

// Addr is the address the server listens on, e.g. "127.0.0.1:8780".
func (s *Server) Addr() string { return s.addr }

// URL is the dashboard's address for a browser, e.g. "http://127.0.0.1:8780/".
func (s *Server) URL() string { return "http://" + s.addr + "/" }

// Close stops the server: open event streams are closed and requests in progress are waited
// for until ctx ends. Closing twice is not an error.
func (s *Server) Close(ctx context.Context) error {
	s.h.shutdown() // event streams end, so Shutdown does not wait for them
	err := s.srv.Shutdown(ctx)
	_ = s.ln.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
