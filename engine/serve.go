package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// DefaultWebhookAddr is where ServeWebhooks listens when no address is given.
const DefaultWebhookAddr = "127.0.0.1:8787"

// WebhookServer serves the engine's webhook schedules over HTTP.
type WebhookServer struct {
	srv  *http.Server
	ln   net.Listener
	addr string
	done chan error
}

// WebhookOption configures ServeWebhooks and WebhookHandler.
type WebhookOption = schedule.HandlerOption

// AllowUnsignedWebhooks serves webhook schedules without secret_env on any address. Without it
// ServeWebhooks refuses a non-loopback address while such a schedule is enabled, and the
// handler answers their requests from a non-loopback address 403 unsigned_webhook_refused
// (for schedules added after the server started).
func AllowUnsignedWebhooks() WebhookOption { return schedule.AllowUnsigned() }

// ServeWebhooks starts an HTTP server on addr ("" = DefaultWebhookAddr; port 0 picks a free
// port) that answers the webhook schedules (WebhookHandler). Bind 127.0.0.1 unless a sender on
// another machine must reach it: an address that is not loopback is refused (code
// invalid_request, naming the schedules) while an enabled webhook schedule has no secret_env,
// unless AllowUnsignedWebhooks is given. Headers must arrive within 10 s and fit in 64 KiB;
// a request must be read within 60 s. Stop it with Close.
func (e *Engine) ServeWebhooks(addr string, opts ...WebhookOption) (*WebhookServer, error) {
	h, err := e.WebhookHandler(opts...)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = DefaultWebhookAddr
	}
	if err := e.checkUnsignedWebhooks(addr, opts); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("cannot listen for webhooks on %s: %v", addr, err), Err: err}
	}
	ws := &WebhookServer{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
		ln:   ln,
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	go func() {
		err := ws.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		ws.done <- err
	}()
	return ws, nil
}

// Addr is the address the server listens on, e.g. "127.0.0.1:8787".
func (w *WebhookServer) Addr() string { return w.addr }

// Close stops accepting requests and waits for the ones in progress, or until ctx ends.
// Closing twice is not an error.
func (w *WebhookServer) Close(ctx context.Context) error {
	err := w.srv.Shutdown(ctx)
	// Shutdown closes only the listeners Serve has taken: one whose goroutine has not entered
	// Serve yet would be closed by Serve later, accepting connections after Close returned.
	_ = w.ln.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// checkUnsignedWebhooks refuses to serve webhooks on addr when it is not a loopback address and
// an enabled webhook schedule has no secret_env, unless opts allow unsigned webhooks.
func (e *Engine) checkUnsignedWebhooks(addr string, opts []WebhookOption) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("webhooks address %q: %v; write HOST:PORT, e.g. 127.0.0.1:8787", addr, err)}
	}
	if httpauth.IsLoopbackHost(host) || schedule.AllowsUnsigned(opts...) {
		return nil
	}
	s, err := e.scheduler()
	if err != nil {
		return err
	}
	ids := s.UnsignedWebhooks()
	if len(ids) == 0 {
		return nil
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = fmt.Sprintf("%q", id)
	}
	return &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf(
		"refusing to serve webhooks on %s, which is not a loopback address: schedule %s has no secret_env, so anyone who can reach the port could start its runs; "+
			"set trigger.secret_env (HMAC-SHA256 signed requests), serve webhooks on 127.0.0.1, or opt in with allow_unsigned_webhooks (dcc-flow serve --allow-unsigned-webhooks)",
		addr, strings.Join(names, ", ")), Details: map[string]any{"schedules": ids}}
}
