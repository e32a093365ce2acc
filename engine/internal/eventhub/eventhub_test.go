package eventhub

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

var errClosed = errors.New("closed")

func closed() error { return errClosed }

// stream returns a list function that finds nothing until ready is set, then one item.
func stream(ready *atomic.Bool, calls *atomic.Int32) func() ([]int, error) {
	return func() ([]int, error) {
		calls.Add(1)
		if ready.Load() {
			return []int{1}, nil
		}
		return nil, nil
	}
}

func TestPollReturnsAtOnceWithItemsOrNoTimeout(t *testing.T) {
	h := New()
	var ready atomic.Bool
	var calls atomic.Int32
	if items, err := Poll(context.Background(), h, 0, 0, closed, stream(&ready, &calls)); items != nil || err != nil || calls.Load() != 1 {
		t.Fatalf("timeout 0: %v, %v after %d calls", items, err, calls.Load())
	}
	ready.Store(true)
	if items, err := Poll(context.Background(), h, time.Hour, 0, closed, stream(&ready, &calls)); len(items) != 1 || err != nil {
		t.Fatalf("with an item: %v, %v", items, err)
	}
}

func TestPollWakesOnNotify(t *testing.T) {
	h := New()
	var ready atomic.Bool
	var calls atomic.Int32
	done := make(chan []int)
	go func() {
		items, _ := Poll(context.Background(), h, time.Hour, 0, closed, stream(&ready, &calls))
		done <- items
	}()
	for calls.Load() < 2 { // the first read, and the one after it started waiting
		time.Sleep(time.Millisecond)
	}
	ready.Store(true)
	h.Notify()
	if items := <-done; len(items) != 1 {
		t.Fatalf("woken: %v", items)
	}
}

func TestPollTicksWhenOthersWrite(t *testing.T) {
	h := New()
	var ready atomic.Bool
	var calls atomic.Int32
	ready.Store(false)
	go func() {
		for calls.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		ready.Store(true) // written by another process: no Notify
	}()
	items, err := Poll(context.Background(), h, time.Hour, 5*time.Millisecond, closed, stream(&ready, &calls))
	if len(items) != 1 || err != nil {
		t.Fatalf("polled: %v, %v", items, err)
	}
}

func TestPollEndsAtTimeoutContextAndClose(t *testing.T) {
	h := New()
	var ready atomic.Bool
	var calls atomic.Int32
	if items, err := Poll(context.Background(), h, 5*time.Millisecond, 0, closed, stream(&ready, &calls)); items != nil || err != nil {
		t.Fatalf("timeout: %v, %v", items, err)
	}
	cause := errors.New("caller gone")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if _, err := Poll(ctx, h, time.Hour, 0, closed, stream(&ready, &calls)); !errors.Is(err, cause) {
		t.Fatalf("ctx ended: %v", err)
	}
	h.Close()
	if _, err := Poll(context.Background(), h, time.Hour, 0, closed, stream(&ready, &calls)); err != errClosed {
		t.Fatalf("closed: %v", err)
	}
	ready.Store(true)
	if items, err := Poll(context.Background(), h, time.Hour, 0, closed, stream(&ready, &calls)); len(items) != 1 || err != nil {
		t.Fatalf("closed with items left: %v, %v", items, err)
	}
}

func TestSubscriptions(t *testing.T) {
	h := New()
	h.Subscribed(1)
	h.Subscribed(1)
	h.Subscribed(-1)
	if n := h.Subscriptions(); n != 1 {
		t.Fatalf("%d subscriptions; want 1", n)
	}
	h.Notify() // nobody waits: nothing happens
}
