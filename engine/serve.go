package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// DefaultWebhookAddr is where ServeWebhooks listens when no address is given.
const DefaultWebhookAddr = "127.0.0.1:8787"

// WebhookServer serves the engine's webhook schedules over HTTP.
type WebhookServer struct {
	srv  *http.Server
	addr string
	done chan error
}

// ServeWebhooks starts an HTTP server on addr ("" = DefaultWebhookAddr; port 0 picks a free
// port) that answers the webhook schedules (WebhookHandler). Requests are signed with
// HMAC-SHA256 when a schedule names a secret, so any address may be used; bind 127.0.0.1 unless
// a sender on another machine must reach it. Stop it with Close.
func (e *Engine) ServeWebhooks(addr string) (*WebhookServer, error) {
	h, err := e.WebhookHandler()
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = DefaultWebhookAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("cannot listen for webhooks on %s: %v", addr, err), Err: err}
	}
	ws := &WebhookServer{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second},
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
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
