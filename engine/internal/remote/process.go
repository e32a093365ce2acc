package remote

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

const (
	// closeGrace is how long a child has to exit after its stdin is closed before it is
	// killed.
	closeGrace = 2 * time.Second
	// waitDelay bounds how long Wait waits for the child's stderr to close after it exited
	// (a grandchild may hold it open).
	waitDelay = time.Second
	// stderrTailSize is how much of the end of a child's stderr is kept for error messages.
	stderrTailSize = 4 << 10
	// exitNoticeWait is how long a failed call waits for a dying child's exit status, to put
	// it in the message.
	exitNoticeWait = 200 * time.Millisecond
)

// process is a child MCP server. The pool owns it: it starts it, notices when it exits, and
// stops it (stdin closed, then killed after closeGrace).
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File // the parent's end of the child's stdin
	stdout *os.File // the parent's end of the child's stdout
	stderr *tail
	exited chan struct{} // closed when Wait has returned
	err    error         // Wait's result, set before exited is closed
	// outDir is where a pool worker keeps its output files (OutputDirEnv); "" for a child that
	// is not a pool worker, or when the directory could not be made.
	outDir string
	// group holds the child and what it starts (its own process group on Unix, a job object on
	// Windows), so that killing or stopping it ends its descendants too.
	group *procGroup
}

// OutputDirEnv is the environment variable that gives each pool worker a directory of its own
// for the files its standard output and error are captured in (python/dcc_flow/_worker.py):
// STREAM.log, emptied when a call begins. The pool reads them when the worker dies during a
// call, and removes the directory when the worker is gone.
const OutputDirEnv = "DCC_FLOW_WORKER_OUTPUT_DIR"

// outputTailSize is how much of the end of each output file is read after a worker died.
const outputTailSize = run.MaxStepLogBytes

// startProcess starts cfg.Command with cfg.Env added to environ (the pool's environment), in
// cfg.Dir.
func startProcess(cfg Config, environ []string) (*process, error) {
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = slices.Clone(environ)
	keys := make([]string, 0, len(cfg.Env))
	for k := range cfg.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+cfg.Env[k]) // exec keeps the last of duplicate keys
	}
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	outDir := ""
	if cfg.pooled() {
		// Without it the worker makes a directory of its own: only its crash output is lost.
		if d, err := os.MkdirTemp("", "dcc-flow-worker-"); err == nil {
			outDir = d
			cmd.Env = append(cmd.Env, OutputDirEnv+"="+d)
		}
	}
	started := false
	defer func() {
		if !started && outDir != "" {
			_ = os.RemoveAll(outDir)
		}
	}()

	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	p := &process{cmd: cmd, stdin: inW, stdout: outR, stderr: &tail{max: stderrTailSize}, exited: make(chan struct{}), outDir: outDir}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, p.stderr
	cmd.WaitDelay = waitDelay
	inNewGroup(cmd)
	err = cmd.Start()
	// The child has its own copies now (or there is no child).
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	started = true
	p.group = joinGroup(cmd.Process)
	go func() {
		p.err = cmd.Wait()
		// What the child left running in its group goes with it, at once: later, on Unix, the
		// group's id could be a new process's.
		p.group.kill()
		p.group.release()
		close(p.exited)
	}()
	return p, nil
}

// callOutput reads what a dead pool worker's running call printed: the end (outputTailSize) of
// each of its output files, as lines, stdout's then stderr's. None for a child without them.
func (p *process) callOutput() []run.LogLine {
	if p.outDir == "" {
		return nil
	}
	var out []run.LogLine
	for _, stream := range []string{run.StreamStdout, run.StreamStderr} {
		out = append(out, logsFromText(stream, readTail(filepath.Join(p.outDir, stream+".log"), outputTailSize))...)
	}
	return out
}

// readTail returns the last limit bytes of the file at path, from the start of a line when it
// had to cut; "" when it cannot be read.
func readTail(path string, limit int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-limit, 0)
	buf := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(buf, off)
	buf = buf[:n]
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	return strings.ToValidUTF8(string(buf), "\uFFFD")
}

// hasExited reports whether the child has exited (and been waited for).
func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill kills the child and every process of its group (what it started and did not move out of
// it). It does not wait.
func (p *process) kill() {
	p.group.kill()
	_ = p.cmd.Process.Kill()
}

// stop closes the child's stdin, gives it closeGrace to exit, then kills it, and waits. Once
// the child has exited, what it left running in its group (a render it forked) is killed too.
func (p *process) stop() {
	p.stdin.Close()
	timer := time.NewTimer(closeGrace)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		p.kill()
		<-p.exited
	}
	p.stdout.Close()
	if p.outDir != "" {
		_ = os.RemoveAll(p.outDir)
	}
}

// describeExit says how the child ended, with the end of its stderr, or "" while it runs.
// It waits up to exitNoticeWait for a child whose stdout has just closed to be reaped.
func (p *process) describeExit() string {
	timer := time.NewTimer(exitNoticeWait)
	defer timer.Stop()
	select {
	case <-p.exited:
	case <-timer.C:
		return ""
	}
	msg := "the process exited"
	if p.err != nil {
		msg = fmt.Sprintf("the process exited (%v)", p.err)
	}
	if s := strings.TrimSpace(p.stderr.String()); s != "" {
		msg += "; stderr: " + s
	}
	return msg
}

// tail is an io.Writer that keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
