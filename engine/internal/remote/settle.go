package remote

import (
	"context"
	"sync"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// stdioTransport is mcp-go's stdio transport, noting in the call's statusBox that a tools/call
// was answered with a result (noteAnswer). For a pool worker (s not nil), a tools/call whose
// context ends returns at once, as before (the client then sends notifications/cancelled), but
// the request stays registered until the worker answers it or the transport closes, so the pool
// knows when the worker is free again (a worker answers a cancelled call when its tool returns).
// Every other method is the embedded transport's.
type stdioTransport struct {
	*transport.Stdio
	s *settler // nil for a child that is not a pool worker
}

func (t *stdioTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if req.Method != string(mcp.MethodToolsCall) || t.s == nil {
		resp, err := t.Stdio.SendRequest(ctx, req)
		noteAnswer(ctx, req, resp, err)
		return resp, err
	}
	type answer struct {
		resp *transport.JSONRPCResponse
		err  error
	}
	ch := make(chan answer, 1)
	t.s.begin()
	go func() {
		resp, err := t.Stdio.SendRequest(context.WithoutCancel(ctx), req)
		noteAnswer(ctx, req, resp, err)
		t.s.end()
		ch <- answer{resp, err}
	}()
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// noteAnswer marks the call's statusBox when the remote answered a tools/call with a result
// rather than a JSON-RPC error: if mcp-go then fails the call, the result was malformed
// (invalid_output), not the transport.
func noteAnswer(ctx context.Context, req transport.JSONRPCRequest, resp *transport.JSONRPCResponse, err error) {
	if err == nil && resp != nil && resp.Error == nil && req.Method == string(mcp.MethodToolsCall) {
		if box := boxOf(ctx); box != nil {
			box.answered.Store(true)
		}
	}
}

// settler counts the tools/call requests a worker has not answered yet.
type settler struct {
	mu      sync.Mutex
	pending int
	done    chan struct{} // closed while pending is 0
}

func newSettler() *settler {
	s := &settler{done: make(chan struct{})}
	close(s.done)
	return s
}

func (s *settler) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == 0 {
		s.done = make(chan struct{})
	}
	s.pending++
}

func (s *settler) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if s.pending == 0 {
		close(s.done)
	}
}

// idle returns a channel closed when no request is pending.
func (s *settler) idle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}
