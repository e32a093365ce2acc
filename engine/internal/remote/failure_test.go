package remote

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// rpcErr is the error mcp-go's client returns for a JSON-RPC error response.
func rpcErr(code int, msg string) error {
	d := mcp.NewJSONRPCErrorDetails(code, msg, nil)
	return d.AsError()
}

func TestClassify(t *testing.T) {
	t.Parallel()
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithTimeout(live, -time.Second)
	defer cancel2()
	ours, cancel3 := context.WithTimeoutCause(live, -time.Second, errCallTimeout)
	defer cancel3()

	cases := []struct {
		name   string
		ctx    context.Context
		err    error
		status int
		want   failure
	}{
		{"caller cancelled", cancelled, transport.NewError(context.Canceled), 0, failure{kind: run.KindCancelled}},
		{"caller deadline", expired, transport.NewError(context.DeadlineExceeded), 0, failure{kind: run.KindTimeout}},
		{"config timeout", ours, transport.NewError(context.DeadlineExceeded), 0, failure{kind: run.KindTimeout}},
		{"method not found", live, rpcErr(mcp.METHOD_NOT_FOUND, "no tools/call"), 0, failure{kind: run.KindNotFound}},
		{"unknown tool, mcp-go", live, rpcErr(mcp.INVALID_PARAMS, "tool 'x' not found: tool not found"), 0, failure{kind: run.KindNotFound}},
		{"unknown tool, TypeScript SDK", live, rpcErr(mcp.INVALID_PARAMS, "MCP error -32602: Tool x not found"), 0, failure{kind: run.KindNotFound}},
		{"unknown tool, other wording", live, rpcErr(mcp.INVALID_PARAMS, "Unknown tool: x"), 0, failure{kind: run.KindNotFound}},
		{"invalid params", live, rpcErr(mcp.INVALID_PARAMS, "scene must be a string"), 0, failure{kind: run.KindInvalidInput}},
		{"resource not found", live, rpcErr(mcp.RESOURCE_NOT_FOUND, "gone"), 0, failure{kind: run.KindNotFound}},
		{"interrupted by the server", live, rpcErr(mcp.REQUEST_INTERRUPTED, "shutting down"), 0, failure{kind: run.KindTransient}},
		{"internal error", live, rpcErr(mcp.INTERNAL_ERROR, "handler failed"), 0, failure{kind: run.KindError}},
		{"other JSON-RPC code", live, rpcErr(-32099, "custom"), 0, failure{kind: run.KindError}},
		{"malformed result", live, errors.New("content is missing"), 0, failure{kind: run.KindError}},
		{"connection refused", live, transport.NewError(fmt.Errorf("failed to send request: %w", errors.New("connect: connection refused"))), 0, failure{kind: run.KindTransient, broken: true}},
		{"child gone", live, transport.NewError(transport.ErrTransportClosed), 0, failure{kind: run.KindTransient, broken: true}},
		{"server error status", live, transport.NewError(errors.New("request failed with status 502: bad gateway")), http.StatusBadGateway, failure{kind: run.KindTransient, broken: true}},
		{"session lost", live, transport.NewError(fmt.Errorf("failed to send request: %w", transport.ErrSessionTerminated)), http.StatusNotFound, failure{kind: run.KindTransient, broken: true, unsent: true}},
		{"401", live, transport.NewError(&transport.AuthorizationRequiredError{}), http.StatusUnauthorized, failure{kind: run.KindPermission, broken: true}},
		{"403", live, transport.NewError(errors.New("request failed with status 403: Forbidden")), http.StatusForbidden, failure{kind: run.KindPermission, broken: true}},
		{"missing token", live, &errMissingToken{env: "T"}, 0, failure{kind: run.KindPermission, broken: true}},
		{"legacy SSE server", live, fmt.Errorf("%w: initialize: %w", errDial, transport.ErrLegacySSEServer), 0, failure{kind: run.KindFatal, broken: true}},
		{"unsupported protocol", live, fmt.Errorf("%w: %w", errDial, mcp.UnsupportedProtocolVersionError{Version: "1999-01-01"}), 0, failure{kind: run.KindFatal, broken: true}},
		{"program not found", live, fmt.Errorf("%w: starting: %w", errDial, exec.ErrNotFound), 0, failure{kind: run.KindFatal, broken: true}},
		{"bad working directory", live, fmt.Errorf("%w: %w", errDial, &fs.PathError{Op: "chdir", Path: "/x", Err: fs.ErrNotExist}), 0, failure{kind: run.KindFatal, broken: true}},
		{"handshake timed out", live, fmt.Errorf("%w: no answer to initialize", errDial), 0, failure{kind: run.KindTransient, broken: true}},
		{"pool closed", live, errPoolClosed, 0, failure{kind: run.KindCancelled}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(tc.ctx, tc.err, tc.status); got != tc.want {
				t.Fatalf("classify(%v, status %d) = %+v, want %+v", tc.err, tc.status, got, tc.want)
			}
		})
	}
}

// A dead worker's output files are read from their end, whole lines only, stdout's then stderr's.
func TestCallOutputOfADeadWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := strings.Repeat("x", outputTailSize-3)
	if err := os.WriteFile(filepath.Join(dir, "stdout.log"), []byte("cut away\n"+long+"\nlast\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stderr.log"), []byte("Fatal: segmentation violation\r\nno newline"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := (&process{outDir: dir}).callOutput()
	want := []run.LogLine{{Stream: "stderr", Text: "Fatal: segmentation violation"}, {Stream: "stderr", Text: "no newline"}}
	if len(got) != 3 || got[0].Stream != "stdout" || got[0].Text != "last" || !reflect.DeepEqual(got[1:], want) {
		t.Fatalf("callOutput = %+v", got)
	}
	if got := (&process{}).callOutput(); got != nil {
		t.Fatalf("no output dir: %+v", got)
	}
	msg := lastLines(append([]run.LogLine{{Stream: "stdout", Text: "a"}}, want...))
	if msg != `; the call's last output lines (3 in all, on the step record): "a", "Fatal: segmentation violation", "no newline"` {
		t.Fatalf("lastLines = %s", msg)
	}
}
