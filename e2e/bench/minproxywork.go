package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/logbuf"
	"github.com/tetherproxy/tether/sidecar/logjson"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/memory"
	usagescan "github.com/tetherproxy/tether/sidecar/usage"
)

// tetherWork is what tether does for each request besides proxying it,
// with tether's own packages, on the minimal proxy's data path (minproxy
// -work): a cancelable context and two clock readings, a request id, the
// session's store key (SHA-256) and its binding in the memory store (a
// new session created on the next backend in turn), the usage scan of
// the response body (read as one JSON document: the bench's answers that
// are not streamed), a request counter and a duration histogram, and,
// with its log, the access line through tether's JSON handler and
// batched writer. What it leaves out is the shape of tether's data path:
// net/http's request, its header maps, the layered server, transport
// and exchange, timers, limits and retries. Section 1 measures it beside
// the minimal proxy and tether (`-proxies go-minimal-work`), so that
// tether's distance from it is what that shape costs
// (docs/hop-cost.md, "Tether's work on the floor").
type tetherWork struct {
	store    *memory.Store
	backends []string
	index    map[string]int // backend address → its pool
	next     atomic.Uint32  // the backend of the next new session, in turn
	log      *logjson.Handler
	flush    *logbuf.Writer
	hit      prometheus.Counter
	miss     prometheus.Counter
	duration prometheus.Observer
}

// requestWork is one request's.
type requestWork struct {
	ctx     context.Context
	cancel  context.CancelFunc
	start   time.Time
	backend int
	key     string
	hit     bool
	id      [36]byte
	scanner usagescan.Scanner
	bytes   int64
	line    [24]slog.Attr
}

// workPool is the pool name the store keys and the log carry.
const workPool = "default/bench"

func newTetherWork(backends []string, withLog bool, logTo io.Writer) *tetherWork {
	st, err := memory.New(context.Background(), &config.MemoryStore{MaxEntries: 1000000}, memory.Options{})
	if err != nil {
		panic(err) // New fails on no input of this shape
	}
	w := &tetherWork{store: st, backends: backends, index: map[string]int{}}
	for i, b := range backends {
		w.index[b] = i
	}
	if withLog {
		// As the sidecar's: lines batched, 64 KiB or 100 ms.
		w.flush = logbuf.New(logTo, 64<<10, 100*time.Millisecond)
		w.log = logjson.New(w.flush, &slog.HandlerOptions{})
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bench_requests_total"}, []string{"pool", "decision"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bench_request_duration_seconds", Buckets: prometheus.DefBuckets}, []string{"pool"})
	prometheus.NewRegistry().MustRegister(requests, duration)
	w.hit, w.miss = requests.WithLabelValues(workPool, "hit"), requests.WithLabelValues(workPool, "miss")
	w.duration = duration.WithLabelValues(workPool)
	return w
}

func (w *tetherWork) close() {
	if w.flush != nil {
		w.flush.Close()
	}
	w.store.Close()
}

// begin decides the backend of a request of the session named sess
// (none: empty): its binding, or a new one.
func (w *tetherWork) begin(ctx context.Context, sess []byte) *requestWork {
	r := &requestWork{start: time.Now()}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.scanner.Reset(false)
	if len(sess) == 0 {
		r.backend = w.inTurn() // no session: balanced, not bound
		return r
	}
	r.key = session.StoreKey(workPool, string(sess))
	if b, ok, _ := w.store.Lookup(r.ctx, r.key, 10*time.Minute); ok {
		r.backend, r.hit = w.index[b.Pod], true
		return r
	}
	r.backend = w.inTurn()
	if b, err := w.store.Create(r.ctx, r.key, store.Binding{Pod: w.backends[r.backend]}, 10*time.Minute); err == nil {
		r.backend = w.index[b.Pod] // another request's, if it came first
	}
	return r
}

// inTurn is the next backend in turn.
func (w *tetherWork) inTurn() int { return int(w.next.Add(1)) % len(w.backends) }

// scan reads the response body as it passes.
func (r *requestWork) scan(p []byte) {
	r.bytes += int64(len(p))
	r.scanner.Write(p)
}

// logs reports whether end writes an access line (and so needs the
// request's method and path).
func (w *tetherWork) logs() bool { return w.log != nil }

// end counts the request and writes its access line: method and path
// the request's, status its answer's (502 when none began).
func (w *tetherWork) end(r *requestWork, method, path string, status int) {
	r.cancel()
	d := time.Since(r.start)
	if r.hit {
		w.hit.Inc()
	} else {
		w.miss.Inc()
	}
	w.duration.Observe(d.Seconds())
	if w.log == nil {
		return
	}
	decision := "miss"
	if r.hit {
		decision = "hit"
	}
	u, _ := r.scanner.Usage()
	attrs := append(r.line[:0],
		slog.String("request_id", proxy.NewRequestID(&r.id)),
		slog.String("pool", workPool),
		slog.String("source", "Header"),
		slog.String("key_hash", r.key),
		slog.String("decision", decision),
		slog.String("selected_pod", w.backends[r.backend]),
		slog.Int64("prompt_tokens", u.PromptTokens),
		slog.Int64("cached_tokens", u.CachedTokens),
		slog.String("method", method),
		slog.String("path", path),
		slog.Int("status", status),
		slog.Int64("bytes", r.bytes),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000),
	)
	logjson.HandleAttrs(r.ctx, w.log, time.Now(), slog.LevelInfo, "request", attrs)
}

// requestLine is a request head's method and path.
func requestLine(head []byte) (method, path string) {
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	m, rest, _ := bytes.Cut(line, []byte(" "))
	target, _, _ := bytes.Cut(rest, []byte(" "))
	target, _, _ = bytes.Cut(target, []byte("?"))
	return string(m), string(target)
}

// statusOf is a response head's status code (0 when it has none).
func statusOf(head []byte) int {
	_, rest, _ := bytes.Cut(head, []byte(" "))
	if len(rest) < 3 {
		return 0
	}
	code := 0
	for _, c := range rest[:3] {
		if c < '0' || c > '9' {
			return 0
		}
		code = code*10 + int(c-'0')
	}
	return code
}
