package remote

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// maxMessageBytes is the largest message accepted from a worker or a remote server: one line
// of a stdio child, one HTTP response body (application/json or an error body), one SSE event.
// It is run.MaxMessageBytes, the bound of in-process results; a variable only so that tests
// can lower it (a Pool reads it when it is made).
var maxMessageBytes int64 = run.MaxMessageBytes

// errMessageTooLarge is the error a body past the limit reads with (mcp-go reports it, wrapped or
// as text; the call's statusBox says what happened).
var errMessageTooLarge = errors.New("a message from the remote is over the size limit")

// Framing of the bytes a frameReader bounds.
const (
	framesLines = iota // newline-delimited JSON-RPC (stdio): each line is a message
	framesSSE          // text/event-stream: each event (up to a blank line) is a message
	framesWhole        // any other HTTP body: the whole body is one message
)

// frameReader passes on what r reads while no message in it is longer than limit bytes. The
// first byte past the limit is never passed on: the reader calls over (once) and every later
// Read returns overErr. So whoever reads through it (mcp-go's bufio readers, which buffer a whole
// line or event) holds at most limit bytes of one message, plus its own buffer, whatever the
// remote writes.
type frameReader struct {
	r       io.Reader
	limit   int64
	framing int
	over    func()
	overErr error

	mu      sync.Mutex // Read and Close may race (mcp-go closes a body from another goroutine)
	n       int64      // bytes of the current message so far
	lineLen int        // framesSSE: bytes of the current line, '\r' not counted
	err     error      // set once the limit was passed
}

func (f *frameReader) Read(p []byte) (int, error) {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, rerr := f.r.Read(p)
	keep, overflow := f.scan(p[:n])
	if overflow {
		f.mu.Lock()
		f.err = f.overErr
		f.mu.Unlock()
		if f.over != nil {
			f.over()
		}
		return keep, nil // the next Read returns overErr
	}
	return n, rerr
}

// scan accounts for chunk and returns how many of its bytes are within the limit, and whether
// the limit was passed in it.
func (f *frameReader) scan(chunk []byte) (int, bool) {
	switch f.framing {
	case framesLines:
		off := 0
		for {
			i := bytes.IndexByte(chunk[off:], '\n')
			if i < 0 {
				if f.n+int64(len(chunk)-off) > f.limit {
					return off + int(f.limit-f.n), true
				}
				f.n += int64(len(chunk) - off)
				return len(chunk), false
			}
			if f.n+int64(i) > f.limit {
				return off + int(f.limit-f.n), true
			}
			f.n = 0
			off += i + 1
		}
	case framesSSE:
		for i, b := range chunk {
			switch b {
			case '\n':
				if f.lineLen == 0 { // a blank line ends the event
					f.n = 0
					continue
				}
				f.lineLen = 0
			case '\r':
			default:
				f.lineLen++
			}
			f.n++
			if f.n > f.limit {
				return i, true
			}
		}
		return len(chunk), false
	default:
		if f.n+int64(len(chunk)) > f.limit {
			keep := int(f.limit - f.n)
			f.n = f.limit
			return keep, true
		}
		f.n += int64(len(chunk))
		return len(chunk), false
	}
}

// boundedBody is an HTTP response body read through a frameReader.
type boundedBody struct {
	frameReader
	body io.ReadCloser
}

func (b *boundedBody) Close() error { return b.body.Close() }

// boundBody makes resp's body fail with errMessageTooLarge once one message in it passes limit
// bytes (an SSE stream: one event; any other body: the whole), marking box (when not nil) as
// too large.
func boundBody(resp *http.Response, limit int64, box *statusBox) {
	framing := framesWhole
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		framing = framesSSE
	}
	b := &boundedBody{body: resp.Body}
	b.frameReader = frameReader{r: resp.Body, limit: limit, framing: framing, overErr: errMessageTooLarge}
	if box != nil {
		b.over = func() { box.tooLarge.Store(true) }
	}
	resp.Body = b
}

// sizeText renders a byte count for messages: "64 MiB", "1.5 MiB", "512 KiB", "100 bytes".
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
