package openlineage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// Delivery tuning: an HTTP POST that fails with a connection error, a timeout, 408, 429 or a
// 5xx status is tried again up to retries more times, waiting backoff, then twice that, …
// (at most maxBackoff) in between.
const (
	defaultRetries = 3
	defaultBackoff = 250 * time.Millisecond
	maxBackoff     = 5 * time.Second
	// bodySnippet is how much of a failed response's body an error quotes; drainLimit how
	// much of any response body is read (so the connection can be reused) before it is closed.
	bodySnippet = 256
	drainLimit  = 64 << 10
)

// Emitter sends events to the places its Config names. Its methods are safe for concurrent
// use, and on a nil *Emitter (OpenLineage off) they do nothing and count nothing. Close it
// when done: it flushes what is queued and stops its goroutine.
type Emitter struct {
	cfg    Config
	client *http.Client // nil without Config.URL
	url    string
	file   string      // absolute; "" without Config.File
	fileMu *sync.Mutex // shared by every Emitter of this process writing that file

	retries int
	backoff time.Duration

	mu     sync.Mutex // guards closed and sending on q
	closed bool
	q      chan item

	ctx    context.Context // cancelled when Close gives up waiting
	cancel context.CancelFunc
	done   chan struct{} // closed when the delivery goroutine returns

	dropped, failed, delivered, abandoned atomic.Int64
}

// item is one encoded event waiting for delivery.
type item struct {
	data []byte
	what string // "COMPLETE event of wf.step attempt 1 (run r-1)", for messages
}

// New checks cfg (Config.Validate), creates Config.File when it is missing (so a path that
// cannot be written fails here rather than at the first event), and starts the delivery
// goroutine.
func New(cfg Config) (*Emitter, error) {
	return newEmitter(cfg, defaultRetries, defaultBackoff)
}

func newEmitter(cfg Config, retries int, backoff time.Duration) (*Emitter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Emitter{cfg: cfg, retries: retries, backoff: backoff, url: cfg.URL}
	if cfg.File != "" {
		abs, err := filepath.Abs(cfg.File)
		if err != nil {
			return nil, fmt.Errorf("openlineage: file %q: %v: give an absolute path", cfg.File, err)
		}
		f, err := os.OpenFile(abs, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("openlineage: file %q cannot be opened for appending (%v): give a writable path, or create its folder", cfg.File, errors.Unwrap(err))
		}
		if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
			f.Close()
			return nil, fmt.Errorf("openlineage: file %q is not a regular file: give the path of a JSON-lines file", cfg.File)
		}
		f.Close()
		e.file = abs
		e.fileMu = fileLock(abs)
	}
	if cfg.URL != "" {
		tr := http.DefaultTransport.(*http.Transport).Clone() // its own: Close can close its connections
		e.client = &http.Client{Transport: tr}
	}
	e.q = make(chan item, cfg.QueueSize)
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.done = make(chan struct{})
	go e.loop()
	return e, nil
}

// fileLocks serialises the appends of every Emitter of this process to one file (by absolute
// path), so that two emitters never interleave parts of their lines. Between processes, each
// line is one write(2) to a file opened O_APPEND, which local file systems do not interleave.
var fileLocks sync.Map // absolute path → *sync.Mutex

func fileLock(abs string) *sync.Mutex {
	m, _ := fileLocks.LoadOrStore(abs, new(sync.Mutex))
	return m.(*sync.Mutex)
}

// Emit encodes ev and queues it for delivery; it never waits for the network or the disk.
// An event that does not encode (Marshal's error), or that finds the queue full or the
// Emitter closed, is not sent: it is counted (Failed, Dropped) and reported through
// Config.OnError.
func (e *Emitter) Emit(ev Event) {
	if e == nil {
		return
	}
	data, warning, err := Marshal(e.cfg, ev)
	if err != nil {
		e.failed.Add(1)
		e.report(err)
		return
	}
	if warning != nil {
		e.report(warning)
	}
	it := item{data: data, what: fmt.Sprintf("%s event of %s attempt %d (run %s)", ev.Type, printable(JobName(ev.Workflow, ev.StepKey)), ev.Attempt, printable(ev.RunID))}
	var why string
	e.mu.Lock()
	if e.closed {
		why = "the emitter is closed"
	} else {
		select {
		case e.q <- it:
		default:
			why = fmt.Sprintf("the queue is full (%d events wait): raise queue_size, or check that the endpoint answers", cap(e.q))
		}
	}
	e.mu.Unlock()
	if why != "" {
		e.dropped.Add(1)
		e.report(fmt.Errorf("openlineage: %s dropped: %s", it.what, why))
	}
}

// Dropped is how many events Emit could not queue (full queue, closed Emitter).
func (e *Emitter) Dropped() int64 {
	if e == nil {
		return 0
	}
	return e.dropped.Load()
}

// Failed is how many events were not delivered: they did not encode, the file could not be
// written, the endpoint kept failing, or Close gave up on them. An event sent to both a file
// and a URL counts once however many of the two failed.
func (e *Emitter) Failed() int64 {
	if e == nil {
		return 0
	}
	return e.failed.Load() + e.abandoned.Load()
}

// Delivered is how many events reached every place configured.
func (e *Emitter) Delivered() int64 {
	if e == nil {
		return 0
	}
	return e.delivered.Load()
}

// Close stops taking events and waits until the queued ones are delivered or ctx ends; then it
// abandons the rest (counted by Failed), cancels the request in flight and returns once the
// delivery goroutine has returned. It returns nil when everything queued was delivered or
// failed on its own, else an error saying how many events were abandoned. Later calls return
// nil once the first has returned; Emit after Close drops. A nil ctx waits for everything.
func (e *Emitter) Close(ctx context.Context) error {
	if e == nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	e.mu.Lock()
	first := !e.closed
	if first {
		e.closed = true
		close(e.q)
	}
	e.mu.Unlock()
	if !first {
		<-e.done
		return nil
	}
	var err error
	select {
	case <-e.done:
	case <-ctx.Done():
		e.cancel()
		<-e.done
		if n := e.abandoned.Load(); n > 0 {
			err = fmt.Errorf("openlineage: Close: %d event(s) not delivered before the deadline (%v)", n, context.Cause(ctx))
		}
	}
	e.cancel()
	if e.client != nil {
		e.client.CloseIdleConnections()
	}
	return err
}

func (e *Emitter) loop() {
	defer close(e.done)
	for it := range e.q {
		if e.ctx.Err() != nil {
			e.abandoned.Add(1)
			continue
		}
		ok := true
		if e.file != "" {
			if err := e.appendLine(it); err != nil {
				ok = false
				e.report(err)
			}
		}
		if e.client != nil {
			if err := e.post(it); err != nil {
				if e.ctx.Err() != nil && ok {
					e.abandoned.Add(1)
					continue
				}
				ok = false
				e.report(err)
			}
		}
		if ok {
			e.delivered.Add(1)
		} else {
			e.failed.Add(1)
		}
	}
}

// appendLine appends it and a newline to the file in one write.
func (e *Emitter) appendLine(it item) error {
	line := make([]byte, 0, len(it.data)+1)
	line = append(append(line, it.data...), '\n')
	e.fileMu.Lock()
	defer e.fileMu.Unlock()
	f, err := os.OpenFile(e.file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("openlineage: %s not written to %s: %v", it.what, e.file, errors.Unwrap(err))
	}
	_, werr := f.Write(line)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("openlineage: %s not written to %s: %v", it.what, e.file, werr)
	}
	return nil
}

// post sends it, trying again on errors that may pass.
func (e *Emitter) post(it item) error {
	var last error
	tries := 0
	for try := 0; try <= e.retries; try++ {
		if try > 0 {
			d := e.backoff << (try - 1)
			if d > maxBackoff || d <= 0 {
				d = maxBackoff
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-e.ctx.Done():
				t.Stop()
				return e.ctx.Err()
			}
		}
		tries++
		retry, err := e.postOnce(it.data)
		if err == nil {
			return nil
		}
		if e.ctx.Err() != nil {
			return e.ctx.Err()
		}
		last = err
		if !retry {
			break
		}
	}
	return fmt.Errorf("openlineage: %s not sent to %s after %d tr%s: %w", it.what, redactURL(e.url), tries, plural(tries, "y", "ies"), last)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// postOnce makes one request; retry says whether a failure may pass on its own.
func (e *Emitter) postOnce(data []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(data))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if e.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.cfg.APIKey)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the caller's message already, redacted
		}
		if ctx.Err() == context.DeadlineExceeded && e.ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v (timeout)", e.cfg.Timeout)
		}
		return true, err
	}
	defer resp.Body.Close()
	var snippet []byte
	if resp.StatusCode/100 != 2 {
		snippet, _ = io.ReadAll(io.LimitReader(resp.Body, bodySnippet))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	msg := fmt.Sprintf("HTTP %s", resp.Status)
	if s := strings.TrimSpace(strings.ToValidUTF8(string(snippet), "�")); s != "" {
		msg += ": " + s
	}
	retry = resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout
	return retry, errors.New(msg)
}

// printable is s, or s quoted when it holds control characters or invalid UTF-8 (a name put in
// a message must not break a log line).
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

// report hands err to Config.OnError, recovering a panic of the hook.
func (e *Emitter) report(err error) {
	if e.cfg.OnError == nil {
		return
	}
	defer func() { _ = recover() }()
	e.cfg.OnError(err)
}
