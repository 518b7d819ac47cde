package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// statsSamples is how many samples the ring keeps: an hour at the
// default interval. The ring's memory is bounded by it whatever the
// interval: each sample holds one number per known label value.
const statsSamples = 360

// defaultStatsEvery is the interval of the samples when Config.StatsEvery
// is zero.
const defaultStatsEvery = 10 * time.Second

// statsSample is one reading of the gateway's own metrics, as GET
// /v1/stats serves it. Counters count since the gateway started: the
// console draws the differences between samples.
type statsSample struct {
	At                   time.Time          `json:"at"`
	Requests             map[string]float64 `json:"requests"`        // idem_requests_total by outcome
	Reconciliations      map[string]float64 `json:"reconciliations"` // idem_reconciliations_total by result
	LeaseEvents          map[string]float64 `json:"lease_events"`    // idem_lease_events_total by event
	UnknownKeys          float64            `json:"unknown_keys"`    // idem_unknown_keys
	UnknownOldestSeconds float64            `json:"unknown_oldest_seconds"`
}

// statsPage is the answer of GET /v1/stats.
type statsPage struct {
	IntervalMillis int64  `json:"interval_ms"`
	Upstream       string `json:"upstream"`  // scheme, host and path only: no credentials, no query
	Reconcile      bool   `json:"reconcile"` // a lookup is configured: POST .../reconcile can ask it
	// StoreUnavailable is the store's error when it did not answer this
	// call's readiness read (the console says the store is down); empty
	// when it answered.
	StoreUnavailable string `json:"store_unavailable,omitempty"`
	// Samples are the ring's, oldest first: at most statsSamples.
	Samples []statsSample `json:"samples"`
}

// statsRing keeps the last statsSamples samples of the gateway's counters,
// read from its Prometheus registry, for the console's overview: a
// Prometheus of its own for the last hour, in a few hundred kilobytes.
type statsRing struct {
	gather prometheus.Gatherer
	every  time.Duration

	mu      sync.Mutex    // guards the fields below
	samples []statsSample // circular once full: next is the oldest
	next    int
}

func newStatsRing(gather prometheus.Gatherer, every time.Duration) *statsRing {
	if every <= 0 {
		every = defaultStatsEvery
	}
	return &statsRing{gather: gather, every: every, samples: make([]statsSample, 0, statsSamples)}
}

// run takes a sample at once and then every s.every, until ctx ends.
func (s *statsRing) run(ctx context.Context) {
	s.sample(time.Now())
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

// sample reads the metrics and adds them to the ring. A gatherer that
// fails for some metrics still returns the others; those are kept.
func (s *statsRing) sample(now time.Time) {
	families, _ := s.gather.Gather()
	smp := statsSample{At: now.UTC(), Requests: map[string]float64{}, Reconciliations: map[string]float64{}, LeaseEvents: map[string]float64{}}
	for _, mf := range families {
		switch mf.GetName() {
		case "idem_requests_total":
			byLabel(smp.Requests, mf, "outcome")
		case "idem_reconciliations_total":
			byLabel(smp.Reconciliations, mf, "result")
		case "idem_lease_events_total":
			byLabel(smp.LeaseEvents, mf, "event")
		case "idem_unknown_keys":
			smp.UnknownKeys = value(mf.GetMetric())
		case "idem_unknown_oldest_seconds":
			smp.UnknownOldestSeconds = value(mf.GetMetric())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) < cap(s.samples) {
		s.samples = append(s.samples, smp)
		return
	}
	s.samples[s.next] = smp
	s.next = (s.next + 1) % len(s.samples)
}

// byLabel puts each metric of mf into m under its value of label, summed
// over its other labels (idem_requests_total's route).
func byLabel(m map[string]float64, mf *dto.MetricFamily, label string) {
	for _, metric := range mf.GetMetric() {
		for _, lp := range metric.GetLabel() {
			if lp.GetName() == label {
				m[lp.GetValue()] += value([]*dto.Metric{metric})
			}
		}
	}
}

// value is the counter's or gauge's value of the first metric, or 0.
func value(ms []*dto.Metric) float64 {
	if len(ms) == 0 {
		return 0
	}
	if c := ms[0].GetCounter(); c != nil {
		return c.GetValue()
	}
	return ms[0].GetGauge().GetValue()
}

// snapshot returns the samples, oldest first. The maps are shared with
// the ring, which never changes a sample once taken.
func (s *statsRing) snapshot() []statsSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]statsSample, 0, len(s.samples))
	out = append(out, s.samples[s.next:]...)
	return append(out, s.samples[:s.next]...)
}

// inBackground runs f on its own goroutine until ctx ends or the returned
// stop is called; stop waits for f to return.
func inBackground(ctx context.Context, f func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	return func() { cancel(); <-done }
}
