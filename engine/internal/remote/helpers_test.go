package remote

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// serverBin is tests/mcpserver, built once by TestMain.
var serverBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// mcpServerEnv names a tests/mcpserver binary built beforehand, for a test binary run where
// there is no Go toolchain (scripts/test_windows.sh runs the Windows build under Wine).
const mcpServerEnv = "DCCFLOW_TEST_MCPSERVER"

func runTests(m *testing.M) int {
	if prebuilt := os.Getenv(mcpServerEnv); prebuilt != "" {
		if _, err := os.Stat(prebuilt); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", mcpServerEnv, err)
			return 1
		}
		serverBin = prebuilt
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "remote-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	serverBin = filepath.Join(dir, "mcpserver")
	if runtime.GOOS == "windows" {
		serverBin += ".exe"
	}
	// go test puts its own GOROOT/bin first on the test's PATH; without a toolchain, set mcpServerEnv.
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(os.Stderr, "building tests/mcpserver needs the go command on PATH (or %s): %v\n", mcpServerEnv, err)
		return 1
	}
	build := exec.Command(goBin, "build", "-o", serverBin, "github.com/dcc-flow/dcc-flow/tests/mcpserver")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building tests/mcpserver: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// callTimeout keeps a broken test from hanging: no call in these tests should come near it.
const callTimeout = 30 * time.Second

// bundle is a pool with one remote, "srv", served by a tests/mcpserver process.
type bundle struct {
	pool    *Pool
	logPath string
	http    *httpServer // nil for stdio
}

// setup starts a bundle over transport "stdio" or "http". mod, if not nil, changes the
// remote's config before the pool is made.
func setup(t *testing.T, transport string, mod func(*Config)) *bundle {
	t.Helper()
	b := &bundle{logPath: filepath.Join(t.TempDir(), "events.log")}
	var cfg Config
	switch transport {
	case "stdio":
		cfg = Config{Command: []string{serverBin, "-log", b.logPath}}
	case "http":
		b.http = startHTTPServer(t, "127.0.0.1:0", "-log", b.logPath)
		cfg = Config{URL: b.http.url}
	default:
		t.Fatalf("unknown transport %q", transport)
	}
	if mod != nil {
		mod(&cfg)
	}
	pool, err := NewPool(map[string]Config{"srv": cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b.pool = pool
	return b
}

var transports = []string{"stdio", "http"}

// call calls tool on "srv" and fails the test on a misuse error.
func (b *bundle) call(t *testing.T, ctx context.Context, tool string, args map[string]any) Result {
	t.Helper()
	if ctx == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(t.Context(), callTimeout)
		defer cancel()
	}
	res, err := b.pool.Call(ctx, "srv", tool, args)
	if err != nil {
		t.Fatalf("Call(%s): %v", tool, err)
	}
	return res
}

// ok calls tool and returns its object output, failing the test on any error.
func (b *bundle) ok(t *testing.T, tool string, args map[string]any) map[string]any {
	t.Helper()
	res := b.call(t, nil, tool, args)
	if res.IsError {
		t.Fatalf("%s: %s: %s", tool, res.Kind, res.Message)
	}
	out, isObj := res.Output.(map[string]any)
	if !isObj {
		t.Fatalf("%s: output %#v is not an object", tool, res.Output)
	}
	return out
}

// await asks the server whether event happened for key, waiting up to ms for it.
func (b *bundle) await(t *testing.T, event, key string, ms int) bool {
	t.Helper()
	out := b.ok(t, "await", map[string]any{"event": event, "key": key, "ms": ms})
	return out["happened"] == true
}

// logLines returns the server's event log.
func (b *bundle) logLines(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// httpServer is a tests/mcpserver process serving streamable HTTP.
type httpServer struct {
	url   string
	addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// startHTTPServer starts the server on addr and waits for its URL. The process is stopped
// when the test ends (stdin closed, killed if it does not exit).
func startHTTPServer(t *testing.T, addr string, args ...string) *httpServer {
	t.Helper()
	cmd := exec.Command(serverBin, append([]string{"-http", addr}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &httpServer{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(s.stop)
	select {
	case s.url = <-lines:
	case <-time.After(callTimeout):
		t.Fatal("the HTTP server printed no URL")
	}
	if !strings.HasPrefix(s.url, "http://") {
		t.Fatalf("the HTTP server printed %q, not its URL", s.url)
	}
	s.addr = strings.TrimSuffix(strings.TrimPrefix(s.url, "http://"), "/mcp")
	return s
}

// stop closes the server's stdin, which makes it exit, and kills it if it does not.
func (s *httpServer) stop() {
	_ = s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// exited waits for the server process to end by itself.
func (s *httpServer) exited(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(callTimeout):
		t.Fatal("the HTTP server did not exit")
	}
}
