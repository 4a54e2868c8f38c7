package loadscrape

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func defaults() config.LoadMetrics {
	p := config.Pool{Affinity: config.Affinity{Mode: config.AffinitySoft}}
	return *p.Load()
}

const vllm = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.99
`

const vllmOld = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 1
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
`

const sglang = `# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 4.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 9.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.75
`

func TestParse(t *testing.T) {
	custom := defaults()
	custom.Waiting, custom.Running, custom.KVUsage = []string{"queue_len"}, []string{"absent"}, nil
	cases := []struct {
		name string
		page string
		cfg  config.LoadMetrics
		want Sample
		err  string
	}{
		// Series are summed; the first kv name present wins over the old one.
		{"vllm", vllm, defaults(), Sample{Waiting: 7, Running: 5, KVUsage: 0.25}, ""},
		{"vllm before v0.10", vllmOld, defaults(), Sample{Waiting: 1, KVUsage: 0.5}, ""},
		{"sglang", sglang, defaults(), Sample{Waiting: 4, Running: 9, KVUsage: 0.75}, ""},
		{"custom names, untyped", "queue_len 12\n", custom, Sample{Waiting: 12}, ""},
		{"no waiting metric", "# TYPE other gauge\nother 1\n", defaults(), Sample{}, "none of the waiting metrics"},
		{"not an exposition", "<html>nope</html>", defaults(), Sample{}, "text format parsing error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.page), tc.cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func newClock() *testkit.Clock { return testkit.NewClock(time.Unix(1000, 0)) }

func page(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body)) }
}

// settable serves whatever handler the test sets.
type settable struct {
	mu sync.Mutex
	h  http.Handler
}

func (s *settable) set(h http.Handler) { s.mu.Lock(); s.h = h; s.mu.Unlock() }
func (s *settable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

func newScraper(t *testing.T, clk *testkit.Clock, addrs ...string) (*Scraper, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	cfg := defaults()
	cfg.Timeout.Duration = 2 * time.Second
	return New(Options{Pool: "p", Config: cfg, Backends: discovery.NewStatic(addrs), Reg: reg, Now: clk.Now}), reg
}

// TestStaleAndFailed: a sample ages out after three intervals; a failed
// scrape counts an error and leaves the last good sample standing until
// it ages out (then extra load 0, never a penalty, and no gauge series);
// the next good scrape brings it back.
func TestStaleAndFailed(t *testing.T) {
	h := &settable{h: page(vllm)}
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	clk := newClock()
	s, reg := newScraper(t, clk, addr)

	s.ScrapeOnce(context.Background())
	if got := s.ExtraLoad(addr); got != 7+5+0.25 {
		t.Fatalf("ExtraLoad = %v, want 12.25", got)
	}
	if w, ok := s.Waiting(addr); !ok || w != 7 {
		t.Fatalf("Waiting = %v %v", w, ok)
	}
	if got := testutil.ToFloat64(s.waiting.WithLabelValues(addr)); got != 7 {
		t.Fatalf("waiting gauge = %v", got)
	}
	clk.Add(3 * time.Second)
	if _, ok := s.Waiting(addr); !ok {
		t.Fatal("sample stale at exactly three intervals")
	}
	clk.Add(time.Millisecond)
	if _, ok := s.Waiting(addr); ok || s.ExtraLoad(addr) != 0 {
		t.Fatal("sample older than three intervals still used")
	}

	s.ScrapeOnce(context.Background())
	h.set(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", 500) }))
	clk.Add(time.Second)
	s.ScrapeOnce(context.Background())
	if w, ok := s.Waiting(addr); !ok || w != 7 {
		t.Fatalf("Waiting after one failed scrape = %v %v, want the last good sample (7)", w, ok)
	}
	if n := testutil.ToFloat64(s.errors); n != 1 {
		t.Fatalf("scrape errors = %v, want 1", n)
	}
	clk.Add(2*time.Second + time.Millisecond)
	s.ScrapeOnce(context.Background())
	if _, ok := s.Waiting(addr); ok || s.ExtraLoad(addr) != 0 {
		t.Fatal("a sample older than three intervals survived failed scrapes")
	}
	if n := testutil.CollectAndCount(reg, "tether_backend_waiting_requests"); n != 0 {
		t.Fatalf("%d waiting series after the sample aged out", n)
	}
	h.set(page(sglang))
	s.ScrapeOnce(context.Background())
	if w, _ := s.Waiting(addr); w != 4 {
		t.Fatalf("Waiting after recovery = %v, want 4", w)
	}
}

// TestUnreachableAndDeparted: a backend nobody listens on only counts an
// error; a backend that left the set is forgotten, gauge included.
func TestUnreachableAndDeparted(t *testing.T) {
	srv := httptest.NewServer(page(vllmOld))
	defer srv.Close()
	dead := httptest.NewServer(page(vllm))
	deadAddr := strings.TrimPrefix(dead.URL, "http://")
	dead.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	clk := newClock()
	s, reg := newScraper(t, clk, addr, deadAddr)
	s.ScrapeOnce(context.Background())
	if _, ok := s.Waiting(deadAddr); ok {
		t.Fatal("unreachable backend has a sample")
	}
	if w, _ := s.Waiting(addr); w != 1 {
		t.Fatalf("Waiting = %v", w)
	}
	s.o.Backends = discovery.NewStatic([]string{deadAddr})
	s.ScrapeOnce(context.Background())
	if _, ok := s.samples[addr]; ok {
		t.Fatal("departed backend's sample kept")
	}
	if n := testutil.CollectAndCount(reg, "tether_backend_waiting_requests"); n != 0 {
		t.Fatalf("%d waiting series of departed backends", n)
	}
}

// TestModelsim scrapes a real modelsim with a request queued behind
// MaxRunning 1, then stops Run.
func TestModelsim(t *testing.T) {
	sm := sim.New(sim.Options{ID: "a", MaxRunning: 1, PrefillPerToken: 0, DecodePerToken: 0})
	srv := httptest.NewServer(sm)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	sm.SetTiming(0, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/completions", strings.NewReader(`{"model":"modelsim","prompt":"hi","max_tokens":2}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	s, _ := newScraper(t, testkit.NewClock(time.Now()), addr)
	s.o.Now = time.Now
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, "modelsim's load scraped", func() error {
		if smp, ok := s.Get(addr); !ok || smp.Waiting != 2 || smp.Running != 1 {
			return fmt.Errorf("sample %+v %v", smp, ok)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}
