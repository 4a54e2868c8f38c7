package healthcheck

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is a server whose /health answers with the status in code.
type backend struct {
	addr string
	code atomic.Int64
	hits atomic.Int64
}

func newBackend(t *testing.T, code int) *backend {
	b := &backend{}
	b.code.Store(int64(code))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" || r.Method != http.MethodGet {
			t.Errorf("checked %s %s", r.Method, r.URL.Path)
		}
		b.hits.Add(1)
		w.WriteHeader(int(b.code.Load()))
	}))
	t.Cleanup(s.Close)
	b.addr = strings.TrimPrefix(s.URL, "http://")
	return b
}

func newChecker(t *testing.T, reg prometheus.Registerer, addrs ...string) *Checker {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return New(Options{
		Backends: discovery.NewStatic(addrs),
		Config: config.HealthCheck{Path: "/health", Interval: config.Duration{Duration: time.Hour},
			Timeout: config.Duration{Duration: time.Second}, UnhealthyThreshold: 3, HealthyThreshold: 2},
		Client: &http.Client{Transport: tr}, Reg: reg,
	})
}

func live(c *Checker) []string {
	var out []string
	for _, b := range c.Current().Backends {
		out = append(out, b.ID)
	}
	return out
}

// TestThresholds: the first round decides on one result; later, three
// failures in a row take a backend out and two successes bring it back.
func TestThresholds(t *testing.T) {
	a, b := newBackend(t, 200), newBackend(t, 500)
	reg := prometheus.NewRegistry()
	c := newChecker(t, reg, a.addr, b.addr)
	ctx := context.Background()
	if c.Synced() {
		t.Fatal("synced before any check")
	}
	c.round(ctx, true)
	if got := live(c); len(got) != 1 || got[0] != a.addr {
		t.Fatalf("after the first round: %v, want only the passing backend", got)
	}
	want := func(step string, ids ...string) {
		t.Helper()
		if got := live(c); strings.Join(got, ",") != strings.Join(ids, ",") {
			t.Fatalf("%s: live %v, want %v", step, got, ids)
		}
	}
	a.code.Store(503)
	b.code.Store(204)
	c.round(ctx, false)
	want("a failed once, b passed once", a.addr)
	a.code.Store(200)
	c.round(ctx, false)
	want("a passed (its streak starts over), b passed twice", a.addr, b.addr)
	a.code.Store(503)
	c.round(ctx, false)
	c.round(ctx, false)
	want("a failed twice", a.addr, b.addr)
	c.round(ctx, false)
	want("a failed three times", b.addr)
	if got := testkit.Metric(t, reg, "tether_backends_unhealthy"); got != 1 {
		t.Fatalf("unhealthy gauge = %v", got)
	}
	if got := testkit.Metric(t, reg, "tether_health_checks_total", "result", "failure"); got < 4 {
		t.Fatalf("failed checks = %v", got)
	}
}

// TestTimeoutFails: a backend that does not answer within the timeout
// fails its check.
func TestTimeoutFails(t *testing.T) {
	hold := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer s.Close()
	defer close(hold)
	c := newChecker(t, nil, strings.TrimPrefix(s.URL, "http://"))
	c.o.Config.Timeout.Duration = 50 * time.Millisecond
	c.round(context.Background(), true)
	if got := live(c); len(got) != 0 {
		t.Fatalf("a silent backend passed: %v", got)
	}
}

// TestRun: Run checks at once, is synced after the first round, checks
// every interval, and stops with its context.
func TestRun(t *testing.T) {
	a := newBackend(t, 200)
	c := newChecker(t, nil, a.addr)
	c.o.Config.Interval.Duration = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	testkit.Eventually(t, 5*time.Second, "synced", c.Synced)
	testkit.Eventually(t, 5*time.Second, "checks every interval", func() bool { return a.hits.Load() >= 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
