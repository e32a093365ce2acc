package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// heapInUse is the Go heap in use after two collections, in bytes.
func heapInUse() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// The dashboard's memory stays flat under rounds of the same load (reads, bad requests, event
// streams that connect and leave, actions): what a round allocates is freed by the next; the
// heap after 8 rounds is within a small bound of the heap after 2, and the goroutines and
// subscriptions come back to where they were.
func TestDashboardMemoryStaysFlat(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a memory figure: not under -short or the race detector (which allocates for itself)")
	}
	b := newBench(t, ui.Options{Coalesce: 5 * time.Millisecond})
	ctx := context.Background()
	addr := strings.TrimPrefix(b.srv.URL, "http://")
	round := func() {
		ids := []string{b.submit(t, "failing", nil), b.submit(t, "echo", map[string]any{"value": "x"})}
		slowID := b.submit(t, "slow", nil)
		var conns []net.Conn
		for i := range 30 {
			q := ""
			if i%2 == 0 {
				q = "?run=" + ids[i%len(ids)] + "&from=1"
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "GET /api/events%s HTTP/1.1\r\nHost: %s\r\n\r\n", q, addr)
			_, _ = bufio.NewReader(c).ReadString('\n')
			conns = append(conns, c)
		}
		for _, id := range ids {
			if _, err := b.e.Wait(ctx, id, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 40 {
			var page struct {
				Runs       []ui.RunSummary `json:"runs"`
				NextCursor string          `json:"next_cursor"`
			}
			b.getJSON(t, "/api/runs?limit=5", &page)
			if page.NextCursor != "" {
				b.getJSON(t, "/api/runs?limit=5&cursor="+page.NextCursor, &page)
			}
			var out map[string]any
			b.getJSON(t, "/api/runs/"+ids[i%2], &out)
			b.getJSON(t, "/api/runs/"+ids[0]+"/steps/boom", &out)
			b.do(t, http.MethodPost, "/api/runs/"+ids[0]+"/cancel", map[string]any{"nope": 1})
			b.do(t, http.MethodGet, "/api/runs?cursor=bad", nil)
			b.do(t, http.MethodDelete, "/api/runs", nil)
		}
		b.post(t, "/api/runs/"+slowID+"/cancel", map[string]any{"by": "ana"}, http.StatusOK)
		for _, c := range conns {
			_ = c.Close()
		}
		waitSubscriptions(t, b.e, 0, 5*time.Second)
	}
	round()
	round()
	g0, h0 := runtime.NumGoroutine(), heapInUse()
	var figures []string
	for range 6 {
		round()
		figures = append(figures, fmt.Sprintf("%.1f", float64(heapInUse())/(1<<20)))
	}
	time.Sleep(100 * time.Millisecond) // the servers' connection goroutines end
	g1, h1 := runtime.NumGoroutine(), heapInUse()
	t.Logf("heap in use %.1f MiB after 2 rounds, then %s MiB; goroutines %d → %d", float64(h0)/(1<<20), strings.Join(figures, ", "), g0, g1)
	if h1 > h0+4<<20 {
		t.Errorf("the heap grew from %.1f to %.1f MiB over 6 rounds of the same load", float64(h0)/(1<<20), float64(h1)/(1<<20))
	}
	if g1 > g0+5 {
		t.Errorf("goroutines %d → %d over 6 rounds", g0, g1)
	}
}
