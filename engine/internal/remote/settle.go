package remote

import (
	"context"
	"sync"
	"time"

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
	answered := make(chan struct{})
	t.s.begin()
	go func() {
		resp, err := t.Stdio.SendRequest(context.WithoutCancel(ctx), req)
		noteAnswer(ctx, req, resp, err)
		t.s.end()
		close(answered)
		ch <- answer{resp, err}
	}()
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-ctx.Done():
		go t.remindCancel(req.ID, context.Cause(ctx), answered, cancelReminderFirst)
		return nil, ctx.Err()
	}
}

// cancelReminderFirst is how long after a call's context ended the pool sends its
// notifications/cancelled again if the worker has not answered; each later reminder waits
// twice as long as the one before (1 s, 2 s, 4 s…: three within the default KillAfter).
const cancelReminderFirst = time.Second

// remindCancel sends notifications/cancelled for request id again, first after wait and then
// at doubling intervals, until the request is answered (answered is closed) or the transport
// refuses to send (it closed: the worker was killed, lost or stopped). mcp-go's client sends
// the notification once, when the context ends; a server that reads it before its handler has
// registered the request (mcp-go's own server hands each request to a goroutine) ignores it
// and runs the call to its end, so the worker stayed busy until KillAfter killed it. The MCP
// specification has a receiver ignore a cancellation of a request it does not know or has
// finished, so a reminder that crosses the answer is harmless.
func (t *stdioTransport) remindCancel(id mcp.RequestId, cause error, answered <-chan struct{}, wait time.Duration) {
	note := mcp.JSONRPCNotification{
		JSONRPC: mcp.JSONRPC_VERSION,
		Notification: mcp.Notification{
			Method: string(mcp.MethodNotificationCancelled),
			Params: mcp.NotificationParams{AdditionalFields: map[string]any{"requestId": id, "reason": cause.Error()}},
		},
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-answered:
			return
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), cancelNoticeTimeout)
		err := t.SendNotification(ctx, note)
		cancel()
		if err != nil {
			return
		}
		wait *= 2
		timer.Reset(wait)
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
