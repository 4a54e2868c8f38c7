// Package proxy forwards a request to the backend the resolver chose:
// httputil.ReverseProxy with Rewrite, streaming flushed as it arrives,
// client cancellation propagated. ServeHTTP owns each request's state (an
// exchange) and drives at most two attempts itself: one that failed
// before any response byte may be retried once on another backend. The
// results feed the pool's outlier detection, the session tokens the
// decision carries are written into the response, and each request,
// however it ends, is logged and counted once, by one deferred finish.
// It knows no stores and no tokens' format.
package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/resolve"
)

// Pool is one pool served on a listener.
type Pool struct {
	Name     string
	Models   []string
	Resolver *resolve.Resolver
	Balancer *balance.Balancer
	// Outliers is the pool's outlier detection, which every upstream
	// result is reported to; nil ejects nothing.
	Outliers *outlier.Detector
	// Transport carries the pool's requests (NewTransport: its dial guard
	// and first-byte timeout).
	Transport http.RoundTripper
	// PrefillHeader, in PD pools, carries the prefill pod's host:port to
	// the decode pod.
	PrefillHeader string
	// StripHeaders are routing headers a client must not be able to set
	// (config.Pool.RoutingHeaders): every pool's on the listener are
	// removed from every request before forwarding.
	StripHeaders []string

	m  poolMetrics
	rp *httputil.ReverseProxy
}

// poolMetrics are the proxy's children of the request-path metrics, taken
// once for the pool (metrics.Child).
type poolMetrics struct {
	requests *metrics.Codes
	bytes    func() prometheus.Counter
	inFlight func() prometheus.Gauge
	upstream func() prometheus.Observer
	duration func() prometheus.Observer
	retries  map[resolve.Reason]func() prometheus.Counter
}

func newPoolMetrics(m *metrics.Metrics, pool string) poolMetrics {
	pm := poolMetrics{
		requests: metrics.NewCodes(m.Requests, pool),
		bytes:    metrics.Child(m.ResponseBytes.WithLabelValues, pool),
		inFlight: metrics.Child(m.InFlight.WithLabelValues, pool),
		upstream: metrics.Child(m.UpstreamLatency.WithLabelValues, pool),
		duration: metrics.Child(m.RequestDuration.WithLabelValues, pool),
		retries:  map[resolve.Reason]func() prometheus.Counter{},
	}
	for _, r := range []resolve.Reason{resolve.ReasonConnectFailed, resolve.ReasonEmptyResponse} {
		pm.retries[r] = metrics.Child(m.Retries.WithLabelValues, pool, string(r))
	}
	return pm
}

// Options configure a Handler.
type Options struct {
	Pools        []Pool
	MaxBodyBytes int64
	Metrics      *metrics.Metrics
	// AccessLog receives one line per request.
	AccessLog *slog.Logger
	Now       func() time.Time
}

// Handler serves one listener.
type Handler struct {
	o       Options
	byModel map[string]*Pool
	strip   []string // every pool's StripHeaders
	// noPool counts requests that matched no pool (pool label "").
	noPool *metrics.Codes
}

// New returns the Handler for a listener serving o.Pools.
func New(o Options) *Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AccessLog == nil {
		o.AccessLog = slog.New(slog.DiscardHandler)
	}
	h := &Handler{o: o, byModel: make(map[string]*Pool), noPool: metrics.NewCodes(o.Metrics.Requests, "")}
	for i := range h.o.Pools {
		p := &h.o.Pools[i]
		p.m = newPoolMetrics(o.Metrics, p.Name)
		p.rp = h.reverseProxy(p.Transport)
		h.strip = append(h.strip, p.StripHeaders...)
		for _, m := range p.Models {
			h.byModel[m] = p
		}
	}
	return h
}

// reverseProxy returns the ReverseProxy of a pool: one round trip per
// call, which ServeHTTP makes at most twice.
func (h *Handler) reverseProxy(t http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		ModifyResponse: h.modifyResponse,
		Transport:      t,
		ErrorHandler:   h.proxyError,
		// Responses of unknown length (SSE, chunked) are flushed on every
		// write by ReverseProxy itself; fixed-length ones need no flushing.
		FlushInterval: 0,
		ErrorLog:      slog.NewLogLogger(h.o.AccessLog.Handler(), slog.LevelWarn),
		// Without a pool ReverseProxy allocates a 32 KiB copy buffer per request.
		BufferPool: bufferPool{},
	}
}

type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// readBody reads a request body of at most limit bytes, sized up front
// when the client declared its length.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength > 0 && r.ContentLength <= limit {
		buf := bytes.NewBuffer(make([]byte, 0, r.ContentLength+1))
		_, err := buf.ReadFrom(body)
		return buf.Bytes(), err
	}
	return io.ReadAll(body)
}

// ServeHTTP forwards one request. Whichever way it ends (an early error
// answer, a proxied response, a client or a backend gone mid-stream), it
// is logged and counted once, by the exchange's deferred finish.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{recorder: recorder{ResponseWriter: w}, h: h, in: r, start: h.o.Now()}
	defer x.finish()
	x.identify()
	body, err := readBody(w, r, h.o.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(x, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.o.MaxBodyBytes))
		} else {
			writeError(x, http.StatusBadRequest, "reading request body: "+err.Error())
		}
		return
	}
	pool, status, msg := h.pool(body)
	if pool == nil {
		writeError(x, status, msg)
		return
	}
	x.pool = pool
	d, err := pool.Resolver.Resolve(r.Context(), r)
	if err != nil {
		x.Header().Set("Retry-After", "1")
		writeError(x, http.StatusServiceUnavailable, "pool "+pool.Name+": "+err.Error())
		return
	}
	x.forward(d, body)
}

// pool picks the pool of a request: the only one on the listener, or the
// one serving the body's "model".
func (h *Handler) pool(body []byte) (*Pool, int, string) {
	if len(h.o.Pools) == 1 {
		return &h.o.Pools[0], 0, ""
	}
	var m struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, http.StatusBadRequest, "this listener serves several pools and picks one by the JSON body's \"model\"; the body is not a JSON object"
	}
	if p := h.byModel[m.Model]; p != nil {
		return p, 0, ""
	}
	return nil, http.StatusNotFound, fmt.Sprintf("model %q is not served on this listener", m.Model)
}

// rewrite points the outbound request at the exchange's current
// decision. Rewrite has already removed hop-by-hop and X-Forwarded-*
// headers from Out.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	x := exchangeOf(pr.In)
	pr.SetXForwarded()
	for _, name := range h.strip {
		pr.Out.Header.Del(name)
	}
	target(pr.Out, x)
}

// modifyResponse notes that the backend answered, watches the body it
// streams, and writes the session tokens of the decision that answered
// (after a retry, the second one), replacing any a backend set.
func (h *Handler) modifyResponse(resp *http.Response) error {
	x := exchangeOf(resp.Request)
	x.answered(resp)
	for _, t := range x.d.Tokens {
		resp.Header.Set(t.Name, t.Value)
	}
	return nil
}

// target aims out at x's current decision.
func target(out *http.Request, x *exchange) {
	out.URL.Scheme = "http"
	out.URL.Host = x.d.Backend.Addr
	out.Host = x.d.Backend.Addr
	if ph := x.pool.PrefillHeader; ph != "" {
		out.Header.Del(ph) // never a client's value
		if x.d.Prefill.Addr != "" {
			out.Header.Set(ph, x.d.Prefill.Addr)
		}
	}
}

// proxyError is called instead of a response when the round trip failed.
// It only records the error: ServeHTTP decides whether to retry or what
// to answer.
func (h *Handler) proxyError(w http.ResponseWriter, _ *http.Request, err error) {
	w.(*exchange).upErr = err
}

// writeError answers in the OpenAI error shape routers already parse.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": "tether_error", "code": code,
	}})
}

// recorder remembers the status and size of a response and whether
// writing it to the client failed. Unwrap lets http.ResponseController
// (which ReverseProxy uses to flush) reach the real writer.
type recorder struct {
	http.ResponseWriter
	code  int
	bytes int64
	// wrote is set once anything, a 1xx included, went to the client.
	wrote bool
	// clientErr is the first error writing to the client (gone away).
	clientErr error
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 && code >= 200 {
		r.code = code
	}
	r.wrote = true
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.wrote = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	if err != nil && r.clientErr == nil {
		r.clientErr = err
	}
	return n, err
}

// FlushError flushes to the client; ReverseProxy flushes every event of
// a stream through it.
func (r *recorder) FlushError() error {
	var err error
	switch w := r.ResponseWriter.(type) {
	case interface{ FlushError() error }:
		err = w.FlushError()
	case http.Flusher:
		w.Flush()
	default:
		return http.ErrNotSupported
	}
	if err != nil && r.clientErr == nil {
		r.clientErr = err
	}
	return err
}

func (r *recorder) Flush() { r.FlushError() }

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
