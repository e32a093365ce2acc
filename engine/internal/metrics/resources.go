package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ResourceGauge is one scarce resource as the engine counts it at a scrape
// (docs/guide/resources.md): its declared limit, the units its own step attempts hold and how
// many of its step attempts wait for it.
type ResourceGauge struct {
	Name                  string
	Limit, InUse, Waiting int
	// Probe is the state of the resource's licence-server probe; nil when it has none.
	Probe *ProbeGauge
}

// ProbeGauge is the state of a resource's probe at a scrape.
type ProbeGauge struct {
	// State is "pending" (no run finished yet), "ok" or "failed".
	State string
	// Free is what the last successful run read as free, at FreeAt (zero: no run succeeded
	// yet, and Free is not reported); it is kept while later runs fail.
	Free   int
	FreeAt time.Time
	// Checked is when the last run ended (zero before the first).
	Checked time.Time
}

// ProbeStates are the values of dccflow_resource_probe_state's label state.
var ProbeStates = []string{"pending", "ok", "failed"}

// The descriptions of the resources' gauges, labelled by resource (the names the engine config
// declares: they bound the label).
var (
	resourceLimit = prometheus.NewDesc("dccflow_resource_limit",
		"The declared limit of each scarce resource.", []string{"resource"}, nil)
	resourceInUse = prometheus.NewDesc("dccflow_resource_in_use",
		"Units of each scarce resource the engine's step attempts hold.", []string{"resource"}, nil)
	resourceWaiting = prometheus.NewDesc("dccflow_resource_waiting",
		"The engine's step attempts waiting for units of each scarce resource.", []string{"resource"}, nil)
	resourceProbeState = prometheus.NewDesc("dccflow_resource_probe_state",
		"The state of each resource's licence-server probe: 1 for its state (pending, ok or failed), 0 for the others.", []string{"resource", "state"}, nil)
	resourceProbeFree = prometheus.NewDesc("dccflow_resource_probe_free",
		"What each resource's probe last read as free (kept while it fails); absent until a run succeeded.", []string{"resource"}, nil)
	resourceProbeFreeAt = prometheus.NewDesc("dccflow_resource_probe_free_timestamp_seconds",
		"When each resource's probe last read a free count (Unix time); absent until a run succeeded.", []string{"resource"}, nil)
	resourceProbeChecked = prometheus.NewDesc("dccflow_resource_probe_checked_timestamp_seconds",
		"When each resource's probe last finished a run, successful or not (Unix time); absent before the first.", []string{"resource"}, nil)
)

// resourceCollector reads the resources at each scrape.
type resourceCollector struct{ read func() []ResourceGauge }

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- resourceLimit
	ch <- resourceInUse
	ch <- resourceWaiting
	ch <- resourceProbeState
	ch <- resourceProbeFree
	ch <- resourceProbeFreeAt
	ch <- resourceProbeChecked
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.read() {
		for _, g := range []struct {
			d *prometheus.Desc
			v int
		}{{resourceLimit, r.Limit}, {resourceInUse, r.InUse}, {resourceWaiting, r.Waiting}} {
			m, err := prometheus.NewConstMetric(g.d, prometheus.GaugeValue, float64(g.v), r.Name)
			if err != nil {
				m = prometheus.NewInvalidMetric(g.d, err)
			}
			ch <- m
		}
		if r.Probe != nil {
			collectProbe(ch, r.Name, r.Probe)
		}
	}
}

// collectProbe sends the gauges of the probe of resource name.
func collectProbe(ch chan<- prometheus.Metric, name string, p *ProbeGauge) {
	send := func(d *prometheus.Desc, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	for _, st := range ProbeStates {
		v := 0.0
		if st == p.State {
			v = 1
		}
		send(resourceProbeState, v, name, st)
	}
	if !p.FreeAt.IsZero() {
		send(resourceProbeFree, float64(p.Free), name)
		send(resourceProbeFreeAt, float64(p.FreeAt.UnixNano())/1e9, name)
	}
	if !p.Checked.IsZero() {
		send(resourceProbeChecked, float64(p.Checked.UnixNano())/1e9, name)
	}
}

// newResourceWait is the histogram of the waits for resources.
func newResourceWait() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dccflow_resource_wait_seconds",
		Help:    "How long each step attempt that asked for units of a scarce resource waited for them (0 when they were free).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"resource"})
}

// ResourceWait records that a step attempt waited d for its units of resource (a no-op without
// declared resources).
func (m *Metrics) ResourceWait(resource string, d time.Duration) {
	if m.resourceWait != nil {
		m.resourceWait.WithLabelValues(resource).Observe(d.Seconds())
	}
}
