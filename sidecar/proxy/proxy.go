// Package proxy forwards a request to the backend the resolver chose:
// httputil.ReverseProxy with Rewrite, streaming flushed as it arrives,
// client cancellation propagated, one retry on another backend when the
// chosen one refuses the connection (before any byte reached the client),
// the session tokens the decision carries written into the response, and
// one access-log line and the metrics of each request, however it ends
// (one deferred finish). It knows no stores and no tokens' format.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/reqbody"
	"github.com/tetherproxy/tether/sidecar/resolve"
	"github.com/tetherproxy/tether/sidecar/responses"
)

// Pool is one pool served on a listener.
type Pool struct {
	Name     string
	Models   []string
	Resolver *resolve.Resolver
	Balancer *balance.Balancer
	// PrefillHeader, in PD pools, carries the prefill pod's host:port to
	// the decode pod.
	PrefillHeader string
	// StripHeaders are routing headers a client must not be able to set
	// (config.Pool.RoutingHeaders): every pool's on the listener are
	// removed from every request before forwarding.
	StripHeaders []string
	// Serves, when set, reports whether the pool serves a model that is
	// not in Models: a pool defined by a ModelServer, whose model changes
	// with the object. Pools of a shared listener are asked in order.
	Serves func(model string) bool

	m poolMetrics
}

// poolMetrics are the proxy's children of the request-path metrics, taken
// once for the pool (metrics.Child).
type poolMetrics struct {
	requests *metrics.Codes
	inFlight func() prometheus.Gauge
	upstream func() prometheus.Observer
	duration func() prometheus.Observer
	retries  func() prometheus.Counter
}

func newPoolMetrics(m *metrics.Metrics, pool string) poolMetrics {
	return poolMetrics{
		requests: metrics.NewCodes(m.Requests, pool),
		inFlight: metrics.Child(m.InFlight.WithLabelValues, pool),
		upstream: metrics.Child(m.UpstreamLatency.WithLabelValues, pool),
		duration: metrics.Child(m.RequestDuration.WithLabelValues, pool),
		retries:  metrics.Child(m.Retries.WithLabelValues, pool),
	}
}

// Options configure a Handler.
type Options struct {
	Pools        []Pool
	MaxBodyBytes int64
	Transport    http.RoundTripper
	Metrics      *metrics.Metrics
	// AccessLog receives one line per request.
	AccessLog *slog.Logger
	Now       func() time.Time

	// BodyReadTimeout is how long reading a request body may go without
	// a byte before the request gets 408; 0: no limit.
	BodyReadTimeout time.Duration

	// Body are the JSON body fields the listener's pools read (the pool's
	// "model", Body sources, the Responses API's): scanned once per
	// request, on first use. nil reads none.
	Body *reqbody.Fields
}

// Handler serves one listener.
type Handler struct {
	o       Options
	byModel map[string]*Pool
	strip   []string // every pool's StripHeaders
	rp      *httputil.ReverseProxy
	// noPool counts requests that matched no pool (pool label "").
	noPool *metrics.Codes
}

// attempt travels in the request context from ServeHTTP through the
// reverse proxy to the transport, which may replace the decision once.
type attempt struct {
	pool    *Pool
	d       *resolve.Decision
	body    []byte
	retried bool
	release func()
	start   time.Time // of the upstream round trip
	header  time.Duration
}

type attemptKey struct{}

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
		h.o.Pools[i].m = newPoolMetrics(o.Metrics, h.o.Pools[i].Name)
		h.strip = append(h.strip, h.o.Pools[i].StripHeaders...)
		for _, m := range h.o.Pools[i].Models {
			h.byModel[m] = &h.o.Pools[i]
		}
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		ModifyResponse: h.modifyResponse,
		Transport:      &retryTransport{base: o.Transport, now: o.Now},
		ErrorHandler:   h.proxyError,
		// Responses of unknown length (SSE, chunked) are flushed on every
		// write by ReverseProxy itself; fixed-length ones need no flushing.
		FlushInterval: 0,
		ErrorLog:      slog.NewLogLogger(o.AccessLog.Handler(), slog.LevelWarn),
		// Without a pool ReverseProxy allocates a 32 KiB copy buffer per request.
		BufferPool: bufferPool{},
	}
	return h
}

type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// firstBodyBuffer is the most a body buffer starts with: a prompt usually
// fits, and a client that announces a large body and sends nothing holds
// no more than this.
const firstBodyBuffer = 16 << 10

// readBody reads a request body of at most limit bytes. The buffer grows
// as bytes arrive, at most doubling what has arrived: a Content-Length
// only keeps an honest client's buffer from growing past its body, it
// never sizes one ahead of the bytes. With idle > 0 the read fails once
// idle passes without a byte (a read deadline on the connection, moved on
// with every read and cleared at the end, since the server reads on
// after the handler has the body to notice a client that goes away).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, idle time.Duration) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	var rc *http.ResponseController
	if idle > 0 {
		rc = http.NewResponseController(w)
		defer rc.SetReadDeadline(time.Time{})
	}
	declared := r.ContentLength
	first := int64(firstBodyBuffer)
	if declared >= 0 {
		first = min(first, declared+1) // +1: room to see EOF without growing
	}
	buf := make([]byte, 0, min(first, limit+1))
	for {
		if len(buf) == cap(buf) {
			grow := int64(2 * cap(buf))
			if declared > int64(len(buf)) {
				grow = min(grow, declared+1)
			}
			buf = append(make([]byte, 0, max(grow, 512)), buf...)
		}
		if rc != nil {
			// ErrNotSupported (a writer that hides the connection) leaves
			// the read without a deadline; the server's own still apply.
			_ = rc.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}

// ServeHTTP forwards one request. Whichever way it ends (an early error
// answer, a proxied response, a client gone mid-stream), it is logged and
// counted once, by the deferred finish.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.o.Now()
	rec := &recorder{ResponseWriter: w}
	var (
		pool *Pool
		att  *attempt
	)
	defer func() { h.finish(rec, r, pool, att, start) }()
	body, err := readBody(w, r, h.o.MaxBodyBytes, h.o.BodyReadTimeout)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(rec, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.o.MaxBodyBytes))
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The rest of the body may still come: the connection cannot
			// carry another request.
			rec.Header().Set("Connection", "close")
			writeError(rec, http.StatusRequestTimeout, fmt.Sprintf("request body: no byte for %s", h.o.BodyReadTimeout))
		default:
			writeError(rec, http.StatusBadRequest, "reading request body: "+err.Error())
		}
		return
	}
	rb := h.o.Body.Of(body)
	r = r.WithContext(reqbody.NewContext(r.Context(), rb))
	pool, status, msg := h.pool(rb)
	if pool == nil {
		writeError(rec, status, msg)
		return
	}
	d, err := pool.Resolver.Resolve(r.Context(), r)
	if lost, ok := errors.AsType[*responses.LostError](err); ok {
		lost.Write(rec) // its backend is gone: no other can answer
		return
	}
	if err != nil {
		rec.Header().Set("Retry-After", "1")
		// Resolve's errors name no backend (ErrNoBackend); keep it so. A
		// pool that is down says why (its ModelServer is gone), which
		// names none either and was logged once when it went down.
		switch {
		case errors.Is(err, resolve.ErrUnavailable):
			writeError(rec, http.StatusServiceUnavailable, "pool "+pool.Name+": "+err.Error())
		default:
			writeError(rec, http.StatusServiceUnavailable, "pool "+pool.Name+": no selectable backend")
			if !errors.Is(err, resolve.ErrNoBackend) {
				h.o.AccessLog.Warn("resolve failed", "pool", pool.Name, "err", err)
			}
		}
		return
	}
	att = &attempt{pool: pool, d: d, body: body, release: pool.Balancer.Acquire(d.Backend.ID)}
	defer func() { att.release() }()
	inflight := pool.m.inFlight()
	inflight.Inc()
	defer inflight.Dec()

	out := r.WithContext(context.WithValue(r.Context(), attemptKey{}, att))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	h.rp.ServeHTTP(rec, out)
}

// pool picks the pool of a request: the only one on the listener, or the
// one serving the body's "model" (read in the body's one scan, with the
// fields the pools route by).
func (h *Handler) pool(body *reqbody.Body) (*Pool, int, string) {
	if len(h.o.Pools) == 1 {
		return &h.o.Pools[0], 0, ""
	}
	if !body.IsObject() {
		return nil, http.StatusBadRequest, "this listener serves several pools and picks one by the JSON body's \"model\"; the body is not a JSON object"
	}
	model, _ := body.String("model")
	if p := h.byModel[model]; p != nil {
		return p, 0, ""
	}
	for i := range h.o.Pools {
		if s := h.o.Pools[i].Serves; s != nil && s(model) {
			return &h.o.Pools[i], 0, ""
		}
	}
	return nil, http.StatusNotFound, fmt.Sprintf("model %q is not served on this listener", model)
}

// rewrite points the outbound request at the decision's backend. Rewrite
// has already removed hop-by-hop and X-Forwarded-* headers from Out:
// X-Forwarded-For is restored from the request and this hop's client (the
// router) appended to it, as the README says; X-Forwarded-Host and -Proto
// keep the router's values (they describe the original request), or
// describe this hop when it sent none.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	att := pr.In.Context().Value(attemptKey{}).(*attempt)
	in, out := pr.In.Header, pr.Out.Header
	out["X-Forwarded-For"] = in["X-Forwarded-For"]
	pr.SetXForwarded()
	for _, k := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v := in[k]; len(v) > 0 {
			out[k] = v
		}
	}
	h.stripRouting(out)
	target(pr.Out, att)
}

// stripRouting removes every routing header a client must not set, in
// any spelling a backend might read as it: case-insensitively, and with
// '_' for '-' (CGI-style servers and some proxies map x_session_token and
// x-session-token to the same variable).
func (h *Handler) stripRouting(hdr http.Header) {
	for k := range hdr {
		for _, name := range h.strip {
			if sameHeaderName(k, name) {
				delete(hdr, k)
				break
			}
		}
	}
}

// sameHeaderName compares header names ASCII case-insensitively, with '_'
// and '-' equal.
func sameHeaderName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// modifyResponse writes the session tokens of the decision that answered
// (after a retry, the second one), replacing any a backend set, and adds
// its token cookie beside the backend's own cookies.
func (h *Handler) modifyResponse(resp *http.Response) error {
	att, _ := resp.Request.Context().Value(attemptKey{}).(*attempt)
	if att == nil {
		return nil
	}
	for _, t := range att.d.Tokens {
		resp.Header.Set(t.Name, t.Value)
	}
	att.pool.Resolver.Answered(att.d, resp)
	for _, c := range att.d.Cookies {
		resp.Header.Add("Set-Cookie", c)
	}
	return nil
}

// target aims out at att's current decision.
func target(out *http.Request, att *attempt) {
	out.URL.Scheme = "http"
	out.URL.Host = att.d.Backend.Addr
	out.Host = att.d.Backend.Addr
	if ph := att.pool.PrefillHeader; ph != "" {
		out.Header.Del(ph) // never a client's value
		if att.d.Prefill.Addr != "" {
			out.Header.Set(ph, att.d.Prefill.Addr)
		}
	}
}

// retryTransport retries a request once on a new decision when the first
// backend could not be dialled. A dial error means no byte was sent and
// none reached the client, so the retry cannot duplicate work.
type retryTransport struct {
	base http.RoundTripper
	now  func() time.Time
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	att, _ := req.Context().Value(attemptKey{}).(*attempt)
	resp, err := t.roundTrip(req, att)
	if err == nil || att == nil || att.retried || !isDialError(err) || req.Context().Err() != nil {
		return resp, err
	}
	nd, rerr := att.pool.Resolver.Retry(req.Context(), att.d)
	if rerr != nil {
		return nil, fmt.Errorf("%w (and no other backend: %v)", err, rerr)
	}
	att.pool.m.retries().Inc()
	att.retried = true
	att.d = nd
	att.release()
	att.release = att.pool.Balancer.Acquire(nd.Backend.ID)
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(att.body))
	target(out, att)
	return t.roundTrip(out, att)
}

func (t *retryTransport) roundTrip(req *http.Request, att *attempt) (*http.Response, error) {
	start := t.now()
	var timeout time.Duration
	if att != nil {
		timeout = att.d.Timeout
	}
	resp, err := withHeaderTimeout(req, timeout, t.base.RoundTrip)
	if att != nil {
		att.start, att.header = start, t.now().Sub(start)
	}
	return resp, err
}

// proxyError answers a request that got no response from upstream. The
// answer names no backend and carries no transport error (those say which
// address was dialled); the log has both.
func (h *Handler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case r.Context().Err() != nil:
		// The client went away; there is nobody to answer. 499 is what the
		// access log shows (nginx's convention for a closed client).
		w.WriteHeader(499)
		return
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		writeError(w, http.StatusGatewayTimeout, "upstream timed out")
	default:
		writeError(w, http.StatusBadGateway, "upstream request failed")
	}
	attrs := []any{"err", err}
	if att, _ := r.Context().Value(attemptKey{}).(*attempt); att != nil {
		attrs = append(attrs, "pool", att.pool.Name, "selected_pod", att.d.Backend.Name, "backend_addr", att.d.Backend.Addr)
	}
	h.o.AccessLog.Warn("upstream error", attrs...)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// finish writes the access-log line and the request metrics.
func (h *Handler) finish(rec *recorder, r *http.Request, pool *Pool, att *attempt, start time.Time) {
	elapsed := h.o.Now().Sub(start)
	code := rec.code
	if code == 0 {
		code = http.StatusOK
	}
	decision := "error" // no decision was made: the request failed before
	attrs := make([]slog.Attr, 0, 16)
	if pool != nil {
		attrs = append(attrs, slog.String("pool", pool.Name))
	}
	if att != nil {
		d := att.d
		decision = string(d.Outcome)
		attrs = append(attrs,
			slog.String("source", string(d.Source)),
			slog.String("key_hash", d.KeyHash),
			slog.String("decision", decision),
			slog.String("selected_pod", d.Backend.Name),
		)
		if d.Prefill.ID != "" {
			attrs = append(attrs, slog.String("prefill_pod", d.Prefill.Name))
		}
		if att.retried {
			attrs = append(attrs, slog.Bool("retried", true))
		}
		if d.StoreError {
			attrs = append(attrs, slog.Bool("store_error", true))
		}
		if !att.start.IsZero() {
			pool.m.upstream().Observe(att.header.Seconds())
			attrs = append(attrs, slog.Float64("upstream_header_ms", ms(att.header)))
		}
	}
	attrs = append(attrs,
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", code),
		slog.Int64("bytes", rec.bytes),
		slog.Float64("duration_ms", ms(elapsed)),
	)
	h.o.AccessLog.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	if pool == nil {
		h.noPool.Inc(decision, code)
		return
	}
	pool.m.requests.Inc(decision, code)
	pool.m.duration().Observe(elapsed.Seconds())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeError answers in the OpenAI error shape routers already parse.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": "tether_error", "code": code,
	}})
}

// recorder remembers the status and size of a response. Unwrap lets
// http.ResponseController (which ReverseProxy uses to flush) reach the
// real writer.
type recorder struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 && code >= 200 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
