package gotest

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
)

// TestTreeFanOutMeasure measures a fan-out of sub-workflows for docs/reference/limits.md ("A tree of
// sub-workflows"); it runs only when asked, as it may take gigabytes with the limits raised:
//
//	DCCFLOW_TREE_N=40 DCCFLOW_TREE_D=3 [DCCFLOW_TREE_MAX_RUNS=N] go test -count=1 -v ./tests/go -run TestTreeFanOutMeasure
//
// N items, N at a time, at each of D levels of foreach over the next level as a workflow step
// (N + N² + … + N^D child runs), with the default limits or max_tree_runs N; it logs the
// outcome, the time, the peak goroutines and the peak RSS.
func TestTreeFanOutMeasure(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("DCCFLOW_TREE_N"))
	d, _ := strconv.Atoi(os.Getenv("DCCFLOW_TREE_D"))
	if n <= 0 || d <= 0 {
		t.Skip("a measurement: set DCCFLOW_TREE_N and DCCFLOW_TREE_D")
	}
	maxRuns, _ := strconv.Atoi(os.Getenv("DCCFLOW_TREE_MAX_RUNS"))
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxTreeRuns = maxRuns }))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ctx = ctx
	top := fanOut(b, d, n, n, n, "abort")
	var peakG atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if g := int64(runtime.NumGoroutine()); g > peakG.Load() {
				peakG.Store(g)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	info := b.run(top, nil)
	close(stop)
	<-sampled
	msg := ""
	if info.Error != nil {
		msg = info.Error.Kind
	}
	hwm := ""
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				hwm = strings.Join(strings.Fields(l)[1:], " ")
			}
		}
	}
	t.Logf("%d × %d: %s %s in %s; peak goroutines %d, peak RSS %s", n, d, info.Status, msg,
		time.Since(start).Round(time.Millisecond), peakG.Load(), hwm)
}
