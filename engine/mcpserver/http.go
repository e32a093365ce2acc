package mcpserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
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
// against DNS rebinding stay on.
func (s *Server) Handler(token string) http.Handler {
	h := server.NewStreamableHTTPServer(s.mcp, server.WithEndpointPath("/mcp"), server.WithStateful(true))
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dcc-flow"`)
			http.Error(w, `{"error":"unauthorized","message":"a bearer token is required"}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// HTTPServer is a running streamable HTTP MCP server.
type HTTPServer struct {
	srv  *http.Server
	addr string
}

// Addr is the listening address, e.g. "127.0.0.1:8765"; the endpoint is http://Addr/mcp.
func (h *HTTPServer) Addr() string { return h.addr }

// URL is the MCP endpoint.
func (h *HTTPServer) URL() string { return "http://" + h.addr + "/mcp" }

// Close stops the server, waiting for requests in progress or until ctx ends.
func (h *HTTPServer) Close(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
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
	hs := &HTTPServer{srv: &http.Server{Handler: s.Handler(token), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second},
		addr: ln.Addr().String()}
	go func() { _ = hs.srv.Serve(ln) }()
	return hs, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
