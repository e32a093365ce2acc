// Package leakcheck fails a test binary whose tests leave goroutines running. A package's
// TestMain calls Main; it runs the tests, then waits for every goroutine the tests started to
// end and, if some are still running after the grace period, prints their stacks and makes the
// binary fail. Test code only: nothing outside *_test.go files imports it.
package leakcheck

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Grace is how long Main waits for the tests' goroutines to end: a goroutine that is already
// returning (a closed engine's last event reader, a net/http connection whose peer hung up)
// gets this long before it counts as leaked.
const Grace = 5 * time.Second

// Option changes what Main counts.
type Option func(*config)

type config struct {
	only   string   // when set, only goroutines whose stack contains it count
	ignore []string // goroutines whose stack contains one of these never count
	grace  time.Duration
	out    io.Writer
}

// Only counts only the goroutines whose stack contains frame (e.g.
// "schedule.(*Scheduler).loop("); without it, every goroutine the tests started counts.
func Only(frame string) Option { return func(c *config) { c.only = frame } }

// Ignore never counts a goroutine whose stack contains frame: for goroutines the standard
// library starts once per process and keeps (e.g. "os/signal.loop"). Name the reason at the call.
func Ignore(frame string) Option { return func(c *config) { c.ignore = append(c.ignore, frame) } }

// processWide are the goroutines the runtime and the standard library start on first use and
// keep for the life of the process: not leaks of any test.
var processWide = []string{
	"os/signal.signal_recv", // signal.Notify's loop, started once
	"os/signal.loop(",
	"runtime.ensureSigM",
}

// Main runs m's tests and returns the exit code for os.Exit: the tests' own, or 1 when they
// passed but goroutines they started (see Only and Ignore) are still running Grace after.
// Leaked goroutines are printed to stderr with their stacks, at most 20.
func Main(m *testing.M, opts ...Option) int {
	c := config{grace: Grace, out: os.Stderr}
	for _, o := range opts {
		o(&c)
	}
	before := ids(goroutines())
	code := m.Run()
	if code != 0 {
		return code // the failure is already reported; leftovers of a failed test are noise
	}
	if leaked := c.wait(before); len(leaked) > 0 {
		fmt.Fprintf(c.out, "leakcheck: %d goroutine(s) the tests started are still running %v after they ended:\n\n", len(leaked), c.grace)
		for i, g := range leaked {
			if i == 20 {
				fmt.Fprintf(c.out, "… and %d more\n", len(leaked)-20)
				break
			}
			fmt.Fprintf(c.out, "%s\n\n", g.stack)
		}
		return 1
	}
	return 0
}

// wait polls until no counted goroutine outside before is left, or the grace period ends;
// it returns those left.
func (c *config) wait(before map[uint64]bool) []goroutine {
	deadline := time.Now().Add(c.grace)
	for {
		var left []goroutine
		for _, g := range goroutines() {
			if !before[g.id] && c.counts(g.stack) {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *config) counts(stack string) bool {
	if c.only != "" && !strings.Contains(stack, c.only) {
		return false
	}
	for _, f := range c.ignore {
		if strings.Contains(stack, f) {
			return false
		}
	}
	for _, f := range processWide {
		if strings.Contains(stack, f) {
			return false
		}
	}
	return true
}

type goroutine struct {
	id    uint64
	stack string
}

// goroutines returns every goroutine but the caller's.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	blocks := strings.Split(strings.TrimSpace(string(buf)), "\n\n")
	out := make([]goroutine, 0, len(blocks))
	for i, b := range blocks {
		if i == 0 {
			continue // the first is the calling goroutine
		}
		if g, ok := parse(b); ok {
			out = append(out, g)
		}
	}
	return out
}

// parse reads a block of runtime.Stack: "goroutine 17 [chan receive]:\n…".
func parse(block string) (goroutine, bool) {
	rest, ok := strings.CutPrefix(block, "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	num, _, ok := strings.Cut(rest, " ")
	if !ok {
		return goroutine{}, false
	}
	id, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return goroutine{}, false
	}
	return goroutine{id: id, stack: block}, true
}

func ids(gs []goroutine) map[uint64]bool {
	m := make(map[uint64]bool, len(gs))
	for _, g := range gs {
		m[g.id] = true
	}
	return m
}
