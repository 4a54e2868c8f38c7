// Package loadscrape reads each backend's load from its Prometheus
// endpoint: queue length (waiting), running requests and KV-cache usage,
// under vLLM's or SGLang's names. One sidecar replica counts only its own
// in-flight requests; the model server's queue counts every replica's, so
// the balancer and soft affinity decide on it.
//
// A failed scrape neither penalises the backend nor erases what it last
// reported: an overloaded model server is exactly the one whose /metrics
// answers late, so its last good sample stands until it ages out (three
// intervals), and then the backend simply has no sample (extra load 0;
// discovery and the proxy's failure handling judge liveness). No sample
// older than three intervals is ever used, so a stuck scrape loop or a
// metrics endpoint that stays down never steers traffic on old numbers.
package loadscrape

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
)

// MaxBodyBytes bounds a scraped page; vLLM's is a few tens of KB.
const MaxBodyBytes = 4 << 20

// Sample is one backend's load at one time.
type Sample struct {
	Waiting float64 // requests queued, not yet scheduled
	Running float64 // requests in the running batch
	KVUsage float64 // KV-cache usage, 0..1
	At      time.Time
}

// Options configure a Scraper.
type Options struct {
	Pool     string
	Config   config.LoadMetrics // defaults applied
	Backends discovery.Source
	// Client does the scraping; its transport must only dial discovered
	// backends (the scraper only asks for their addresses).
	Client *http.Client
	Reg    prometheus.Registerer
	Log    *slog.Logger
	Now    func() time.Time
}

// Scraper keeps the latest Sample of every backend of one pool.
type Scraper struct {
	o       Options
	mu      sync.Mutex
	samples map[string]Sample // by backend ID
	errors  prometheus.Counter
	waiting *prometheus.GaugeVec
}

// New returns a Scraper; Run starts it.
func New(o Options) *Scraper {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	s := &Scraper{o: o, samples: map[string]Sample{}}
	s.errors = prometheus.NewCounter(prometheus.CounterOpts{
		Name:        "tether_load_scrape_errors_total",
		Help:        "Failed scrapes of backends' load metrics (the last good sample stands until it ages out; never a penalty).",
		ConstLabels: prometheus.Labels{"pool": o.Pool},
	})
	// One series per backend of the pool: bounded by the pool's size.
	s.waiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name:        "tether_backend_waiting_requests",
		Help:        "Requests waiting in each backend's queue, as last scraped.",
		ConstLabels: prometheus.Labels{"pool": o.Pool},
	}, []string{"backend"})
	if o.Reg != nil {
		o.Reg.MustRegister(s.errors, s.waiting)
	}
	return s
}

// Run scrapes every backend every interval until ctx ends.
func (s *Scraper) Run(ctx context.Context) error {
	t := time.NewTicker(s.o.Config.Interval.Duration)
	defer t.Stop()
	for {
		s.ScrapeOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ScrapeOnce scrapes every selectable backend once, concurrently, and
// forgets backends that left the set.
func (s *Scraper) ScrapeOnce(ctx context.Context) {
	set := s.o.Backends.Current()
	if set == nil {
		return
	}
	var wg sync.WaitGroup
	for _, list := range [][]discovery.Backend{set.Backends, set.Prefill} {
		for _, b := range list {
			wg.Go(func() {
				smp, err := s.scrape(ctx, b.Addr)
				s.mu.Lock()
				defer s.mu.Unlock()
				if err != nil {
					// The last good sample stands until it ages out.
					if ctx.Err() == nil {
						s.errors.Inc()
						s.o.Log.Debug("load scrape failed", "backend", b.Name, "err", err)
					}
					return
				}
				s.samples[b.ID] = smp
				s.waiting.WithLabelValues(b.Name).Set(smp.Waiting)
			})
		}
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.o.Now()
	for id, smp := range s.samples {
		b, ok := set.Get(id)
		if !ok {
			delete(s.samples, id)
			continue
		}
		if s.stale(smp, now) {
			// Aged out (its scrapes keep failing): no figure is better than
			// an old one, for routing and for the gauge alike.
			delete(s.samples, id)
			s.waiting.DeleteLabelValues(b.Name)
		}
	}
	s.pruneGauges(set)
}

// pruneGauges drops the gauge series of backends no longer in set.
func (s *Scraper) pruneGauges(set *discovery.Set) {
	keep := map[string]bool{}
	for _, list := range [][]discovery.Backend{set.Backends, set.Prefill} {
		for _, b := range list {
			keep[b.Name] = true
		}
	}
	ch := make(chan prometheus.Metric, 64)
	go func() { s.waiting.Collect(ch); close(ch) }()
	var gone []string
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "backend" && !keep[l.GetValue()] {
				gone = append(gone, l.GetValue())
			}
		}
	}
	for _, n := range gone {
		s.waiting.DeleteLabelValues(n)
	}
}

func (s *Scraper) scrape(ctx context.Context, addr string) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Config.Timeout.Duration)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+s.o.Config.Path, nil)
	if err != nil {
		return Sample{}, err
	}
	// The text format: every server that speaks OpenMetrics also speaks it.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := s.o.Client.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return Sample{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	smp, err := Parse(io.LimitReader(resp.Body, MaxBodyBytes), s.o.Config)
	smp.At = s.o.Now()
	return smp, err
}

// Parse reads a Prometheus text exposition and returns the load it shows.
// For each signal the first configured name present is used, summed over
// its series (a server exposing one series per model or engine rank
// queues on all of them). A page with none of the waiting names is an
// error: the names are wrong for this server and its load is unknown.
func Parse(r io.Reader, c config.LoadMetrics) (Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, err
	}
	var smp Sample
	var ok bool
	if smp.Waiting, ok = first(fams, c.Waiting); !ok {
		return Sample{}, fmt.Errorf("none of the waiting metrics %q is exposed", c.Waiting)
	}
	smp.Running, _ = first(fams, c.Running)
	smp.KVUsage, _ = first(fams, c.KVUsage)
	return smp, nil
}

func first(fams map[string]*dto.MetricFamily, names []string) (float64, bool) {
	for _, n := range names {
		f, ok := fams[n]
		if !ok {
			continue
		}
		var sum float64
		for _, m := range f.GetMetric() {
			switch {
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Untyped != nil:
				sum += m.Untyped.GetValue()
			}
		}
		return sum, true
	}
	return 0, false
}

// Get returns backend id's sample if it is fresh (younger than three
// intervals).
func (s *Scraper) Get(id string) (Sample, bool) {
	s.mu.Lock()
	smp, ok := s.samples[id]
	s.mu.Unlock()
	if !ok || s.stale(smp, s.o.Now()) {
		return Sample{}, false
	}
	return smp, true
}

// stale: older than three intervals.
func (s *Scraper) stale(smp Sample, now time.Time) bool {
	return now.Sub(smp.At) > 3*s.o.Config.Interval.Duration
}

// Waiting is backend id's scraped queue length; ok is false without a
// fresh sample.
func (s *Scraper) Waiting(id string) (float64, bool) {
	smp, ok := s.Get(id)
	return smp.Waiting, ok
}

// Queue returns backend id's waiting and running requests; ok is false
// without a fresh sample.
func (s *Scraper) Queue(id string) (waiting, running float64, ok bool) {
	smp, ok := s.Get(id)
	return smp.Waiting, smp.Running, ok
}

// ExtraLoad is the balancer's extra load of backend id: waiting plus
// running requests, plus KV-cache usage (0..1) as a tie-breaker among
// equal counts. A backend without a fresh sample adds nothing.
func (s *Scraper) ExtraLoad(id string) float64 {
	smp, ok := s.Get(id)
	if !ok {
		return 0
	}
	return smp.Waiting + smp.Running + smp.KVUsage
}
