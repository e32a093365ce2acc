package engine

import (
	"context"
	"testing"
	"time"
)

// Run ids sort by creation also when runs are created within one millisecond (a Windows clock
// often gives two runs the same time: the listing of a parent's child runs, newest first by
// (created_at, id), then put a retry's child before the failed one), and carry the new
// millisecond once the clock moves on.
func TestRunIDsIncreaseWithinAMillisecond(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
	clk := NewStubClock(t0)
	e, err := Open(context.Background(), Config{StallAfterSecs: -1}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	prev := e.newRunID()
	check := func(what string) {
		t.Helper()
		id := e.newRunID()
		if len(id) != len(prev) || id <= prev {
			t.Fatalf("%s: id %s does not sort after %s", what, id, prev)
		}
		prev = id
	}
	for i := 0; i < 1000; i++ {
		check("same millisecond")
	}
	clk.Set(t0.Add(time.Second))
	check("next second")
	if got, want := prev[1:13], hexMS(uint64(t0.Add(time.Second).UnixMilli())); got != want {
		t.Fatalf("time prefix %s, want the new clock's %s", got, want)
	}
}

func hexMS(ms uint64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 12)
	for i := 11; i >= 0; i-- {
		b[i] = digits[ms&15]
		ms >>= 4
	}
	return string(b)
}
