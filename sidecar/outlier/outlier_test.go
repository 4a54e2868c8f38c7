package outlier

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

type fixture struct {
	d     *Detector
	clock *testkit.Clock
	reg   *prometheus.Registry
	size  int
}

func newFixture(t *testing.T, size int, mutate func(*config.OutlierDetection)) *fixture {
	t.Helper()
	cfg := config.OutlierDetection{ConsecutiveFailures: 5, BaseEjectionTime: config.Duration{Duration: 30 * time.Second},
		MaxEjectionTime: config.Duration{Duration: 300 * time.Second}, MaxEjectionPercent: 50}
	if mutate != nil {
		mutate(&cfg)
	}
	f := &fixture{clock: testkit.NewClock(time.Unix(1_700_000_000, 0)), reg: prometheus.NewRegistry(), size: size}
	f.d = New(Options{Pool: "ns/p", Config: cfg, Size: func() int { return f.size }, Reg: f.reg, Now: f.clock.Now})
	return f
}

func (f *fixture) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testkit.Metric(t, f.reg, name, append([]string{"pool", "ns/p"}, labels...)...)
}

func TestConsecutiveFailuresEject(t *testing.T) {
	f := newFixture(t, 4, nil)
	for i := 1; i <= 4; i++ {
		if f.d.Failure("a", ServerError) {
			t.Fatalf("ejected after %d failures, threshold 5", i)
		}
	}
	f.d.Success("a") // the streak is broken
	for i := 1; i <= 4; i++ {
		f.d.Failure("a", Reset)
	}
	if f.d.Ejected("a") {
		t.Fatal("ejected although a success broke the streak")
	}
	if !f.d.Failure("a", Timeout) || !f.d.Ejected("a") {
		t.Fatal("not ejected after 5 failures in a row")
	}
	if f.d.Ejected("b") {
		t.Fatal("another backend is ejected")
	}
	if got := f.metric(t, "tether_backend_ejections_total", "reason", ReasonConsecutiveFailures); got != 1 {
		t.Fatalf("ejections = %v", got)
	}
	if got := f.metric(t, "tether_backends_ejected"); got != 1 {
		t.Fatalf("ejected gauge = %v", got)
	}
	if got := f.metric(t, "tether_backend_failures_total", "kind", "reset"); got != 4 {
		t.Fatalf("reset failures = %v", got)
	}
	f.clock.Add(30*time.Second - time.Millisecond)
	if !f.d.Ejected("a") {
		t.Fatal("back before the base ejection time")
	}
	f.clock.Add(time.Millisecond)
	if f.d.Ejected("a") {
		t.Fatal("still ejected after the base ejection time")
	}
	if got := f.metric(t, "tether_backends_ejected"); got != 0 {
		t.Fatalf("ejected gauge after the ejection = %v", got)
	}
}

func TestConnectFailureEjectsAtOnce(t *testing.T) {
	f := newFixture(t, 2, nil)
	if !f.d.Failure("a", ConnectFailed) || !f.d.Ejected("a") {
		t.Fatal("a refused connection did not eject")
	}
	if got := f.metric(t, "tether_backend_ejections_total", "reason", ReasonConnectFailed); got != 1 {
		t.Fatalf("ejections = %v", got)
	}
}

// TestEjectionTimeGrows: each ejection lasts base × the times ejected,
// capped, and a backend that stays well long enough is forgiven.
func TestEjectionTimeGrows(t *testing.T) {
	f := newFixture(t, 2, func(c *config.OutlierDetection) { c.MaxEjectionTime.Duration = 70 * time.Second })
	ejectFor := func() time.Duration {
		t.Helper()
		if !f.d.Failure("a", ConnectFailed) {
			t.Fatal("not ejected")
		}
		var d time.Duration
		for f.d.Ejected("a") {
			f.clock.Add(time.Second)
			d += time.Second
		}
		return d
	}
	for i, want := range []time.Duration{30 * time.Second, 60 * time.Second, 70 * time.Second, 70 * time.Second} {
		if got := ejectFor(); got != want {
			t.Fatalf("ejection %d lasted %s, want %s", i+1, got, want)
		}
	}
	// Four ejections remembered; 3 × 30 s without one forgives three.
	f.clock.Add(90 * time.Second)
	if got := ejectFor(); got != 60*time.Second {
		t.Fatalf("after 90s back: ejection lasted %s, want 60s (two ejections remembered)", got)
	}
	f.clock.Add(time.Hour)
	if got := ejectFor(); got != 30*time.Second {
		t.Fatalf("after an hour back: ejection lasted %s, want the base 30s", got)
	}
}

// TestMaxEjectionPercent: at most half of a pool is out at once, and one
// backend always may be.
func TestMaxEjectionPercent(t *testing.T) {
	for _, tc := range []struct {
		size, percent, want int
	}{{1, 50, 1}, {2, 50, 1}, {3, 50, 1}, {4, 50, 2}, {5, 50, 2}, {10, 10, 1}, {4, 100, 4}} {
		t.Run(fmt.Sprintf("%d backends %d%%", tc.size, tc.percent), func(t *testing.T) {
			f := newFixture(t, tc.size, func(c *config.OutlierDetection) { c.MaxEjectionPercent = tc.percent })
			n := 0
			for i := range tc.size {
				if f.d.Failure(fmt.Sprint("b", i), ConnectFailed) {
					n++
				}
			}
			if n != tc.want {
				t.Fatalf("%d ejected, want %d", n, tc.want)
			}
			if got := f.metric(t, "tether_backend_ejections_skipped_total"); got != float64(tc.size-tc.want) {
				t.Fatalf("skipped = %v", got)
			}
		})
	}
	// When an ejection ends, another backend may take its place.
	f := newFixture(t, 2, nil)
	f.d.Failure("a", ConnectFailed)
	if f.d.Failure("b", ConnectFailed) {
		t.Fatal("both backends of two ejected")
	}
	f.clock.Add(31 * time.Second)
	if !f.d.Failure("b", ConnectFailed) {
		t.Fatal("b not ejected after a came back")
	}
}

func TestNilDetectorEjectsNothing(t *testing.T) {
	off := false
	d := New(Options{Config: config.OutlierDetection{Enabled: &off}})
	if d != nil {
		t.Fatal("enabled: false built a detector")
	}
	if d.Failure("a", ConnectFailed) || d.Ejected("a") {
		t.Fatal("a nil detector ejected")
	}
	d.Success("a")
}

// TestForgets: records of backends that recovered are dropped, so
// backends that come and go do not pile up.
func TestForgets(t *testing.T) {
	f := newFixture(t, 100, nil)
	for i := range 50 {
		id := fmt.Sprint("pod-", i)
		f.d.Failure(id, Reset)
		f.d.Success(id)
	}
	f.d.Failure("x", ConnectFailed)
	f.clock.Add(time.Minute)
	f.d.Failure("y", ConnectFailed)
	f.d.mu.Lock()
	n := len(f.d.hosts)
	f.d.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d records kept, want only y's", n)
	}
	if f.d.streaks.Load() != 0 {
		t.Fatalf("streaks = %d", f.d.streaks.Load())
	}
}

func TestConcurrentUse(t *testing.T) {
	f := newFixture(t, 8, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			id := fmt.Sprint("b", g%4)
			for i := range 1000 {
				if i%3 == 0 {
					f.d.Failure(id, Reset)
				} else {
					f.d.Success(id)
				}
				f.d.Ejected(id)
			}
		})
	}
	wg.Wait()
}
