package mcpserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// DefaultHTTPAddr is where ListenHTTP listens when no address is given.
const DefaultHTTPAddr = "127.0.0.1:8765"

// Handler returns the streamable HTTP handler (endpoint /mcp). With a non-empty token every
// request needs `Authorization: Bearer <token>` (401 otherwise). mcp-go's Host/Origin checks
// against DNS rebinding stay on. A session, and its resource subscriptions, lasts until the
// client ends it (HTTP DELETE); ListenHTTP's Close also ends every session, a bare Handler
// does not.
func (s *Server) Handler(token string) http.Handler {
	h, _ := s.handler(token)
	return h
}

// handler returns the HTTP handler and the streamable server under it; opts are added.
func (s *Server) handler(token string, opts ...server.StreamableHTTPOption) (http.Handler, *server.StreamableHTTPServer) {
	opts = append([]server.StreamableHTTPOption{
		server.WithEndpointPath("/mcp"), server.WithStateful(true),
		// mcp-go logs transport trouble (a client gone mid-stream) to slog.Default, i.e. stderr,
		// which is the host's (a DCC's console, a stdio MCP peer): this package writes nowhere.
		server.WithStreamableHTTPLogger(slog.New(slog.DiscardHandler)),
	}, opts...)
	h := server.NewStreamableHTTPServer(s.mcp, opts...)
	if token == "" {
		return h, h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dcc-flow"`)
			http.Error(w, `{"error":"unauthorized","message":"a bearer token is required"}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}), h
}

// HTTPServer is a running streamable HTTP MCP server.
type HTTPServer struct {
	mcp  *server.StreamableHTTPServer // knows the http.Server (WithStreamableHTTPServer)
	addr string
}

// Addr is the listening address, e.g. "127.0.0.1:8765"; the endpoint is http://Addr/mcp.
func (h *HTTPServer) Addr() string { return h.addr }

// URL is the MCP endpoint.
func (h *HTTPServer) URL() string { return "http://" + h.addr + "/mcp" }

// Close stops the server: it ends every MCP session (their GET streams and resource
// subscriptions, so no notification follows), including sessions that requests in progress
// open meanwhile, and waits for those requests or until ctx ends (mcp-go's Shutdown).
func (h *HTTPServer) Close(ctx context.Context) error {
	err := h.mcp.Shutdown(ctx)
	h.mcp.CloseSessions(ctx) // one that the last request in progress opened
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ListenHTTP serves streamable HTTP on addr ("" = DefaultHTTPAddr; port 0 picks one). Binding
// an address that is not loopback without a token is refused (code invalid_request).
func (s *Server) ListenHTTP(addr, token string) (*HTTPServer, error) {
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
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("cannot listen for MCP on %s: %v", addr, err), Err: err}
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	// The streamable server knows srv so that its Shutdown stops it after closing the sessions.
	handler, streamable := s.handler(token, server.WithStreamableHTTPServer(srv))
	srv.Handler = handler
	hs := &HTTPServer{mcp: streamable, addr: ln.Addr().String()}
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
