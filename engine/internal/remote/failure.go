package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// failure is a classified error: the kind reported to the engine and what the pool does with
// the connection.
type failure struct {
	kind string
	// broken means the connection is unusable: the next call makes a new one.
	broken bool
	// unsent means the server cannot have run the request (it refused the session), so the
	// call may be sent again at once on a new connection.
	unsent bool
}

var (
	errPoolClosed = errors.New("the remote pool is closed")
	// errCallTimeout is the cause of a context ended by Config.Timeout.
	errCallTimeout = errors.New("remote call timed out")
)

// errMissingToken reports an unset token_env variable.
type errMissingToken struct{ env string }

func (e *errMissingToken) Error() string {
	return fmt.Sprintf("environment variable %s (token_env) is not set or empty", e.env)
}

// ctxKind is the kind of a call whose context ended: timeout for a deadline (ours or the
// caller's), cancelled otherwise.
func ctxKind(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), errCallTimeout) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return run.KindTimeout
	}
	return run.KindCancelled
}

// classify maps an error from mcp-go to a kind. ctx is the call's context; status is the last
// HTTP error status seen for the call (0 when none, or for stdio).
//
//   - the call's context ended: timeout or cancelled;
//   - a JSON-RPC error from the server: method not found → not_found; invalid params →
//     not_found when the message says the tool is not found or unknown (mcp-go, the
//     TypeScript SDK and the spec answer an unknown tool with -32602), else invalid_input;
//     request interrupted → transient; anything else → error;
//   - HTTP 401/403 → permission; a server that only speaks the deprecated HTTP+SSE
//     transport, or an unsupported protocol version → fatal;
//   - any other failure of the transport (refused, reset, closed pipe, child exited, 5xx) →
//     transient, and the connection is dropped;
//   - anything else (a malformed result) → error.
func classify(ctx context.Context, err error, status int) failure {
	if ctx.Err() != nil {
		return failure{kind: ctxKind(ctx)}
	}
	var missing *errMissingToken
	var unsupported mcp.UnsupportedProtocolVersionError
	switch {
	case errors.Is(err, errPoolClosed):
		return failure{kind: run.KindCancelled}
	case errors.As(err, &missing):
		return failure{kind: run.KindPermission, broken: true}
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		// The program could not be started: a configuration problem, not worth retrying.
		return failure{kind: run.KindFatal, broken: true}
	case errors.Is(err, transport.ErrAuthorizationRequired),
		status == http.StatusUnauthorized, status == http.StatusForbidden:
		return failure{kind: run.KindPermission, broken: true}
	case errors.Is(err, transport.ErrLegacySSEServer), errors.As(err, &unsupported):
		return failure{kind: run.KindFatal, broken: true}
	case errors.Is(err, transport.ErrSessionTerminated):
		return failure{kind: run.KindTransient, broken: true, unsent: true}
	case errors.Is(err, mcp.ErrMethodNotFound), errors.Is(err, mcp.ErrResourceNotFound):
		return failure{kind: run.KindNotFound}
	case errors.Is(err, mcp.ErrInvalidParams):
		msg := strings.ToLower(err.Error())
		if strings.Contains(msg, "not found") || strings.Contains(msg, "unknown tool") {
			return failure{kind: run.KindNotFound}
		}
		return failure{kind: run.KindInvalidInput}
	case errors.Is(err, mcp.ErrRequestInterrupted):
		return failure{kind: run.KindTransient}
	}
	var te *transport.Error
	if errors.As(err, &te) || errors.Is(err, transport.ErrTransportClosed) || errors.Is(err, errDial) {
		return failure{kind: run.KindTransient, broken: true}
	}
	return failure{kind: run.KindError}
}

// errDial marks an error from making a connection that has no more specific class.
var errDial = errors.New("connecting")

// statusKey carries a *statusBox in a request context, for statusRecorder.
type statusKey struct{}

// statusBox holds what the transports saw of the requests made for one call: the last HTTP
// error status (≥ 400), whether a response body passed the message size limit, and whether the
// remote answered tools/call with a result (not a JSON-RPC error), so that a result mcp-go could
// not parse is told from a failure of the transport.
type statusBox struct {
	code     atomic.Int32
	tooLarge atomic.Bool
	answered atomic.Bool
}

// boxOf returns the statusBox of ctx (withStatusBox), or nil.
func boxOf(ctx context.Context) *statusBox {
	box, _ := ctx.Value(statusKey{}).(*statusBox)
	return box
}

// overLimit reports whether a response of the call passed the message size limit.
func (b *statusBox) overLimit() bool { return b != nil && b.tooLarge.Load() }

// gotResult reports whether the remote answered the call with a result.
func (b *statusBox) gotResult() bool { return b != nil && b.answered.Load() }

func withStatusBox(ctx context.Context) (context.Context, *statusBox) {
	box := &statusBox{}
	return context.WithValue(ctx, statusKey{}, box), box
}

func (b *statusBox) get() int {
	if b == nil {
		return 0
	}
	return int(b.code.Load())
}

// statusRecorder is an http.RoundTripper that records error statuses in the request
// context's statusBox (mcp-go reports most of them only as text), and bounds every response
// body to limit bytes per message (boundBody).
type statusRecorder struct {
	base  http.RoundTripper
	limit int64
}

func (s statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	box := boxOf(req.Context())
	if resp.StatusCode >= 400 && box != nil {
		box.code.Store(int32(resp.StatusCode))
	}
	boundBody(resp, s.limit, box)
	return resp, nil
}
