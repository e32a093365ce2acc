package engine

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/internal/fakeprobe"
)

// The metrics carry each probe's state (one of pending, ok, failed at 1), what it last read as
// free and when, and when it last ran: a probe that starts failing shows failed, keeps the
// last free count it read, and the limit goes back to the declared one.
func TestResourceProbeMetrics(t *testing.T) {
	ctx := context.Background()
	lmstat := fakeprobe.New(t)
	lmstat.Set("ok", 7) // 10 issued, 7 in use: 3 free
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	clk := clock.NewStub(t0)
	cfg := Config{StallAfterSecs: -1, Resources: map[string]ResourceConfig{
		"houdini": {Limit: 4, Probe: &ResourceProbe{Command: lmstat.Command("-f", "houdini"), Parser: "lmstat", EverySecs: 60}},
		"gpu":     {Limit: 2}}}
	e, err := Open(ctx, cfg, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	ran := make(chan string, 4)
	e.resGate.Prober().SetChecked(func(r string) { ran <- r })
	h, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	check := func(when string, want, absent []string) {
		t.Helper()
		body := scrape()
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				t.Errorf("%s: the scrape lacks %s", when, w)
			}
		}
		for _, a := range absent {
			if strings.Contains(body, a) {
				t.Errorf("%s: the scrape has %s", when, a)
			}
		}
	}
	at := func(t time.Time) string {
		return strings.TrimSuffix(fmt.Sprintf("%g", float64(t.UnixNano())/1e9), ".0")
	}
	// Open ran the probe once, at t0.
	check("after the first run", []string{
		`dccflow_resource_probe_state{resource="houdini",state="ok"} 1`,
		`dccflow_resource_probe_state{resource="houdini",state="failed"} 0`,
		`dccflow_resource_probe_state{resource="houdini",state="pending"} 0`,
		`dccflow_resource_probe_free{resource="houdini"} 3`,
		`dccflow_resource_probe_free_timestamp_seconds{resource="houdini"} ` + at(t0),
		`dccflow_resource_probe_checked_timestamp_seconds{resource="houdini"} ` + at(t0),
		`dccflow_resource_limit{resource="houdini"} 3`,
	}, []string{`dccflow_resource_probe_state{resource="gpu"`, `dccflow_resource_probe_free{resource="gpu"}`})

	lmstat.Set("fail", 0)
	wakeProbe(t, clk, 60*time.Second, ran)
	t1 := t0.Add(60 * time.Second)
	check("once it fails", []string{
		`dccflow_resource_probe_state{resource="houdini",state="ok"} 0`,
		`dccflow_resource_probe_state{resource="houdini",state="failed"} 1`,
		`dccflow_resource_probe_free{resource="houdini"} 3`, // the last it read
		`dccflow_resource_probe_free_timestamp_seconds{resource="houdini"} ` + at(t0),
		`dccflow_resource_probe_checked_timestamp_seconds{resource="houdini"} ` + at(t1),
		`dccflow_resource_limit{resource="houdini"} 4`, // the declared limit
	}, nil)
}
