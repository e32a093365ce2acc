package tracing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// maxBatch is the most spans one export sends.
const maxBatch = 512

// queue is the span processor between the spans and the exporter: OnEnd puts an ended span on
// a bounded channel without ever waiting (a full channel drops the span, counted), and one
// goroutine exports batches of up to maxBatch spans, when a batch fills or every delay. An
// export that fails (the collector is down, slow past the exporter's timeout, or refused the
// spans) counts its spans failed; nothing retries, so a dead collector costs each run nothing
// more than the channel send.
type queue struct {
	exp   sdktrace.SpanExporter
	ch    chan sdktrace.ReadOnlySpan
	batch int // the most spans one export sends: min(maxBatch, the queue's size)
	delay time.Duration
	// ctx is the context of every export; Shutdown cancels it when its own context ends, so
	// that an export stuck on a slow collector returns (its spans counted failed).
	ctx    context.Context
	cancel context.CancelFunc
	flush  chan chan struct{} // a ForceFlush: closed once what was queued before it is exported
	stop   chan struct{}      // closed by Shutdown
	done   chan struct{}      // closed when the goroutine returned
	once   sync.Once
	// closed is set by Shutdown: later spans are counted dropped.
	closed atomic.Bool

	exported, dropped, failed atomic.Int64
}

func newQueue(exp sdktrace.SpanExporter, size int, delay time.Duration) *queue {
	q := &queue{exp: exp, ch: make(chan sdktrace.ReadOnlySpan, size), batch: min(maxBatch, size), delay: delay,
		flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	go q.loop()
	return q
}

func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s for export, or drops it when the queue is full or shut down.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if q.closed.Load() {
		q.dropped.Add(1)
		return
	}
	select {
	case q.ch <- s:
	default:
		q.dropped.Add(1)
	}
}

func (q *queue) loop() {
	defer close(q.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, q.batch)
	t := time.NewTimer(q.delay)
	defer t.Stop()
	send := func() {
		if len(batch) == 0 {
			return
		}
		if err := q.exp.ExportSpans(q.ctx, batch); err != nil {
			q.failed.Add(int64(len(batch)))
		} else {
			q.exported.Add(int64(len(batch)))
		}
		clear(batch)
		batch = batch[:0]
	}
	// drain moves what is queued now into batches and exports them.
	drain := func() {
		for {
			select {
			case s := <-q.ch:
				batch = append(batch, s)
				if len(batch) == q.batch {
					send()
				}
			default:
				send()
				return
			}
		}
	}
	for {
		select {
		case s := <-q.ch:
			batch = append(batch, s)
			if len(batch) == q.batch {
				send()
			}
		case <-t.C:
			send()
			t.Reset(q.delay)
		case ack := <-q.flush:
			drain()
			close(ack)
		case <-q.stop:
			send() // what came after Shutdown's flush: failed at once if Shutdown's time is up
			return
		}
	}
}

// ForceFlush exports what was queued before it; it returns when that is done or ctx ends.
func (q *queue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case q.flush <- ack:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Shutdown exports what is queued, until ctx ends (then the export under way is cancelled),
// and shuts the exporter down; spans still queued then are counted failed. Once it returned,
// Stats are final and the export goroutine has ended.
func (q *queue) Shutdown(ctx context.Context) error {
	var err error
	q.once.Do(func() {
		flushed := make(chan struct{})
		go func() {
			_ = q.ForceFlush(ctx)
			close(flushed)
		}()
		select {
		case <-flushed:
		case <-ctx.Done():
		}
		q.closed.Store(true)
		close(q.stop)
		select {
		case <-q.done:
		case <-ctx.Done():
			q.cancel() // the export under way returns, failed
			<-q.done
		}
		<-flushed
		q.cancel()
		for {
			select {
			case <-q.ch:
				q.failed.Add(1)
				continue
			default:
			}
			break
		}
		err = q.exp.Shutdown(ctx)
	})
	return err
}
