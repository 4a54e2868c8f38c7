package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// ChurnOptions shape a load run: Sessions distinct sessions, one turn
// each, at Rate per second, through Replicas replicas (one: the memory
// store; more: a gossip ring) whose stores hold at most MaxEntries
// bindings, so the stores evict all along.
type ChurnOptions struct {
	Name       string
	Sessions   int
	Rate       float64
	MaxEntries int
	Replicas   int
	Backends   int
	// Samples is how many times the run is measured (after each equal
	// part of it), besides once after a short warm-up.
	Samples int
}

// restBeforeSample is how long a load run rests before a sample: past the
// sidecar's idle timeout of upstream connections (4 s).
const restBeforeSample = 5 * time.Second

// RunChurn runs the load and samples the first replica's goroutines,
// open file descriptors, heap, RSS and bindings after each part, with
// the latency of that part's requests.
func RunChurn(env *procs.Env, o ChurnOptions) (Churn, error) {
	store := Memory
	if o.Replicas > 1 {
		store = Gossip
	}
	c, err := NewCluster(env, store, o.Backends, "--prefill-per-token", "0", "--decode-per-token", "0")
	if err != nil {
		return Churn{}, err
	}
	defer c.Close()
	// The access log off (warn): a million lines measure the disk.
	if err := c.AddReplicas(o.Replicas, ReplicaOptions{MaxEntries: o.MaxEntries, LogLevel: "warn"}); err != nil {
		return Churn{}, err
	}
	res := Churn{Name: o.Name, Sessions: o.Sessions, Rate: o.Rate, MaxEntries: o.MaxEntries, Replicas: o.Replicas}
	// As a router should: idle keep-alive connections are closed before
	// the sidecar closes them (120 s), so a request is not written into a
	// connection the sidecar is closing that moment.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second},
		Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	next := 0
	var replayed atomic.Int64
	do := func(ctx context.Context, i int) error {
		n := next + i
		r := c.Replicas[n%len(c.Replicas)]
		body := fmt.Sprintf(`{"model":"modelsim","max_tokens":1,"messages":[{"role":"user","content":"churn session %d"}]}`, n)
		// The turn of a new session: sending it again is harmless, so it
		// is marked idempotent (Idempotency-Key, not sent: nil), and Go's
		// transport sends it again, as it does a GET, when a reused
		// connection closed before any response byte (the keep-alive race
		// every HTTP/1.1 client meets). Counted: a second connection for
		// one request.
		conns := 0
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
			if conns++; conns == 2 {
				replayed.Add(1)
			}
		}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.URL("/v1/chat/completions"), strings.NewReader(body))
		req.Header.Set("X-Session-ID", fmt.Sprint("churn-", n))
		req.Header["Idempotency-Key"] = nil
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	run := func(sessions int) *loadgen.Result {
		r := loadgen.Run(context.Background(), loadgen.Config{Rate: o.Rate, Duration: time.Duration(float64(sessions) / o.Rate * float64(time.Second)), MaxInFlight: 512}, do)
		next += r.Sent
		res.Failed += r.Errors
		if r.FirstErr != nil && res.FirstErr == "" {
			res.FirstErr = r.FirstErr.Error()
		}
		// Sampled at rest: every request answered (Run returns after the
		// last response), the client's idle connections closed and the
		// sidecar's upstream ones past their idle timeout, so that what
		// is left open is what a leak would leave, not the pools of the
		// part's peak concurrency.
		client.CloseIdleConnections()
		time.Sleep(restBeforeSample)
		return r
	}
	start := time.Now()
	// A short warm-up: connections open, the first sample has the
	// working set of a running sidecar.
	s, err := sample(c.Replicas[0], next, run(int(o.Rate)))
	if err != nil {
		return res, err
	}
	res.Samples = append(res.Samples, s)
	part := (o.Sessions - next) / o.Samples
	for range o.Samples {
		s, err := sample(c.Replicas[0], next, run(part))
		if err != nil {
			return res, err
		}
		res.Samples = append(res.Samples, s)
	}
	res.Sessions, res.Elapsed, res.Replayed = next, time.Since(start), int(replayed.Load())
	for _, r := range c.Replicas {
		if err := r.Process().Exited(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// sample reads a replica's process figures from its /metrics; a figure
// the replica does not report is -1.
func sample(r *Replica, sessions int, res *loadgen.Result) (Sample, error) {
	g, err := testkit.ScrapeURL(context.Background(), r.AdminURL("/metrics"))
	if err != nil {
		return Sample{}, err
	}
	get := func(name string) float64 {
		v, err := testkit.FindMetric(g, name)
		if err != nil {
			return -1
		}
		return v
	}
	return Sample{
		Sessions: sessions, Goroutines: get("go_goroutines"), OpenFDs: get("process_open_fds"),
		HeapBytes: get("go_memstats_heap_inuse_bytes"), RSSBytes: get("process_resident_memory_bytes"),
		Bindings: get("tether_bindings_live"),
		P50:      res.Latency.Quantile(0.5), P99: res.Latency.Quantile(0.99),
	}, nil
}
