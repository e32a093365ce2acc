package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// DefaultAddr is where Serve listens when no address is given.
const DefaultAddr = "127.0.0.1:9464"

// Server serves metrics on GET /metrics.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	addr string
}

// Serve starts an HTTP server on addr ("" = DefaultAddr; port 0 picks a free port) answering
// GET /metrics with the handler handler returns and 404 elsewhere. A token makes every request
// need the header "Authorization: Bearer TOKEN" (401 without it). An address that is not
// loopback is refused (code invalid_request) without a token, or with a weak one
// (httpauth.CheckToken). handler is called once the address is accepted, before listening; its
// error is returned as is.
func Serve(addr, token string, handler func() (http.Handler, error)) (*Server, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("metrics address %q: %v; write HOST:PORT, e.g. %s", addr, err, DefaultAddr)}
	}
	if !httpauth.IsLoopbackHost(host) && token == "" {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf(
			"refusing to serve metrics on %s, which is not a loopback address, without a token: serve them on 127.0.0.1 or give a token (dcc-flow serve --token), which scrapers send as \"Authorization: Bearer TOKEN\"", addr)}
	}
	if !httpauth.IsLoopbackHost(host) {
		if err := httpauth.CheckToken("metrics", addr, token); err != nil {
			return nil, &run.Error{Code: run.CodeInvalidRequest, Message: err.Error()}
		}
	}
	h, err := handler()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("cannot listen for metrics on %s: %v", addr, err), Err: err}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", requireBearer(token, h))
	s := &Server{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
		ln: ln, addr: ln.Addr().String(),
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// requireBearer answers 401 to a request without "Authorization: Bearer token", and 429 with
// Retry-After to an address throttled for wrong tokens (httpauth.Throttle); an empty token lets
// every request through.
func requireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	throttle := httpauth.NewThrottle(time.Now)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, wait := throttle.Bearer(r, token)
		if wait > 0 {
			w.Header().Set("Retry-After", httpauth.RetryAfter(wait))
			http.Error(w, "dcc-flow metrics: too many wrong tokens from this address; try again later", http.StatusTooManyRequests)
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dcc-flow metrics"`)
			http.Error(w, "dcc-flow metrics: send Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Addr is the address the server listens on, e.g. "127.0.0.1:9464".
func (s *Server) Addr() string { return s.addr }

// Close stops accepting requests and waits for the ones in progress, or until ctx ends.
// Closing twice is not an error.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	_ = s.ln.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
