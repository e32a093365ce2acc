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
}

// The descriptions of the resources' gauges, labelled by resource (the names the engine config
// declares: they bound the label).
var (
	resourceLimit = prometheus.NewDesc("dccflow_resource_limit",
		"The declared limit of each scarce resource.", []string{"resource"}, nil)
	resourceInUse = prometheus.NewDesc("dccflow_resource_in_use",
		"Units of each scarce resource the engine's step attempts hold.", []string{"resource"}, nil)
	resourceWaiting = prometheus.NewDesc("dccflow_resource_waiting",
		"The engine's step attempts waiting for units of each scarce resource.", []string{"resource"}, nil)
)

// resourceCollector reads the resources at each scrape.
type resourceCollector struct{ read func() []ResourceGauge }

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- resourceLimit
	ch <- resourceInUse
	ch <- resourceWaiting
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
