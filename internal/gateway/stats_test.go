package gateway

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The ring samples at its interval, keeps the last statsSamples samples
// oldest first, and reads each counter by its label, summed over its
// other labels (the route, issue 36 item 2).
func TestStatsRingKeepsTheLastHour(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_requests_total"}, []string{"outcome", "route"})
		unknown := prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_unknown_keys"})
		reg.MustRegister(requests, unknown)
		ring := newStatsRing(reg, 0)
		if ring.every != defaultStatsEvery {
			t.Fatalf("interval of a zero StatsEvery = %v; want %v", ring.every, defaultStatsEvery)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); ring.run(ctx) }()
		start := time.Now()
		const steps = statsSamples + 40 // more than the ring holds
		for i := 1; i <= steps; i++ {
			synctest.Wait() // the sample of the previous tick is taken
			route := []string{"charges", ""}[i%2]
			requests.WithLabelValues("executed", route).Inc()
			if i%2 == 0 {
				requests.WithLabelValues("replayed", route).Inc()
			}
			unknown.Set(float64(i))
			time.Sleep(defaultStatsEvery)
		}
		synctest.Wait()
		cancel()
		<-done

		got := ring.snapshot()
		if len(got) != statsSamples {
			t.Fatalf("%d samples kept after %d ticks; want the last %d", len(got), steps, statsSamples)
		}
		first, last := got[0], got[len(got)-1]
		if want := start.Add(time.Duration(steps-statsSamples+1) * defaultStatsEvery).UTC(); !first.At.Equal(want) {
			t.Fatalf("oldest sample at %v; want %v", first.At, want)
		}
		if !last.At.Equal(start.Add(steps*defaultStatsEvery).UTC()) || last.Requests["executed"] != steps ||
			last.Requests["replayed"] != steps/2 || last.UnknownKeys != steps {
			t.Fatalf("newest sample %+v; want at the last tick, executed %d, replayed %d, unknown %d", last, steps, steps/2, steps)
		}
		for i := 1; i < len(got); i++ {
			if d := got[i].At.Sub(got[i-1].At); d != defaultStatsEvery || got[i].Requests["executed"] != got[i-1].Requests["executed"]+1 {
				t.Fatalf("samples %d and %d: %v apart, executed %v then %v; want one interval and one request apart",
					i-1, i, d, got[i-1].Requests["executed"], got[i].Requests["executed"])
			}
		}
	})
}
