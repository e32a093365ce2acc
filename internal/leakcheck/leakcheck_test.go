package leakcheck

import (
	"strings"
	"testing"
	"time"
)

func TestWaitReportsOnlyGoroutinesStartedSinceTheSnapshot(t *testing.T) {
	old := make(chan struct{})
	go func() { <-old }() // running before the snapshot: never counted
	defer close(old)
	before := ids(goroutines())

	stuck := make(chan struct{})
	defer close(stuck)
	go func() { <-stuck }()
	ending := make(chan struct{})
	go func() { <-ending }()
	time.AfterFunc(20*time.Millisecond, func() { close(ending) }) // ends within the grace period

	c := config{grace: 500 * time.Millisecond}
	left := c.wait(before)
	if len(left) != 1 || !strings.Contains(left[0].stack, "TestWaitReportsOnlyGoroutinesStartedSinceTheSnapshot.func2") {
		t.Fatalf("left: %+v", left)
	}
}

func TestOnlyAndIgnoreFilter(t *testing.T) {
	before := ids(goroutines())
	stuck := make(chan struct{})
	defer close(stuck)
	go func() { <-stuck }()

	for _, tc := range []struct {
		name string
		c    config
		want int
	}{
		{"all", config{}, 1},
		{"only another frame", config{only: "schedule.(*Scheduler).loop("}, 0},
		{"only this test", config{only: "TestOnlyAndIgnoreFilter.func"}, 1},
		{"ignored", config{ignore: []string{"TestOnlyAndIgnoreFilter.func"}}, 0},
	} {
		if got := len(tc.c.wait(before)); got != tc.want {
			t.Errorf("%s: %d goroutines, want %d", tc.name, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	g, ok := parse("goroutine 17 [chan receive]:\nmain.f()\n\tx.go:1 +0x1")
	if !ok || g.id != 17 {
		t.Fatalf("%+v %v", g, ok)
	}
	for _, bad := range []string{"", "goroutine x [running]:", "nope 1 [running]:"} {
		if _, ok := parse(bad); ok {
			t.Errorf("parse(%q) ok", bad)
		}
	}
}
