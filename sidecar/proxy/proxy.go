// Package proxy forwards a request to the backend the resolver chose:
// ReverseProxy's rules (hop-by-hop headers, X-Forwarded-*, trailers, 1xx
// responses), streaming flushed as it arrives, client cancellation
// propagated. ServeHTTP owns each request's state (an
// exchange) and drives its attempts itself: one that failed before any
// response byte may be retried on another backend (maxRetries). The
// results feed the pool's outlier detection, the session tokens the
// decision carries are written into the response, and each request,
// however it ends, is logged and counted once, by one deferred finish.
// It knows no stores and no tokens' format.
package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/coarse"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/reqbody"
	"github.com/tetherproxy/tether/sidecar/resolve"
	"github.com/tetherproxy/tether/sidecar/responses"
	"github.com/tetherproxy/tether/sidecar/upstream"
	"github.com/tetherproxy/tether/sidecar/usage"
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
	// Transport carries the pool's requests (NewUpstream: round trips on
	// the handler's goroutine, and the dial guard).
	Transport http.RoundTripper
	// FirstByteTimeout bounds each attempt's wait for response headers
	// after the request was sent, unless the decision has its own Timeout
	// (a ModelServer's trafficPolicy.timeout); 0: no limit.
	FirstByteTimeout time.Duration
	// RetryOnTimeout retries on another backend an attempt that got no
	// response headers within its first-byte timeout (Envoy's
	// per_try_timeout, HAProxy's retry-on response-timeout), once per
	// request at most.
	RetryOnTimeout bool
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
	// transport is Transport with each attempt's first-byte timeout.
	transport http.RoundTripper
	// bounded is the pool's transport when it bounds the wait for the
	// response headers itself; nil: each request's exchange runs the
	// first-byte clock (headerClock).
	bounded headerTimeoutTransport
	// prefillName is PrefillHeader's canonical form: its name among a
	// listed request's fields.
	prefillName string
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
	usage    *usage.PoolMetrics
}

func newPoolMetrics(m *metrics.Metrics, pool string) poolMetrics {
	pm := poolMetrics{
		requests: metrics.NewCodes(m.Requests, pool),
		bytes:    metrics.Child(m.ResponseBytes.WithLabelValues, pool),
		inFlight: metrics.Child(m.InFlight.WithLabelValues, pool),
		upstream: metrics.Child(m.UpstreamLatency.WithLabelValues, pool),
		duration: metrics.Child(m.RequestDuration.WithLabelValues, pool),
		retries:  map[resolve.Reason]func() prometheus.Counter{},
		usage:    m.Usage.Pool(pool),
	}
	for _, r := range []resolve.Reason{resolve.ReasonConnectFailed, resolve.ReasonEmptyResponse, resolve.ReasonTimeout} {
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

	// BodyReadTimeout is how long reading a request body may go without
	// a byte before the request gets 408 (1 to 1.5 times it, readBody);
	// 0: no limit.
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
		base := p.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		p.bounded, _ = base.(headerTimeoutTransport)
		p.transport = firstByteTransport{base: base, pool: p}
		if p.PrefillHeader != "" {
			p.prefillName = textproto.CanonicalMIMEHeaderKey(p.PrefillHeader)
		}
		h.strip = append(h.strip, p.StripHeaders...)
		for _, m := range p.Models {
			h.byModel[m] = p
		}
	}
	return h
}

// buffers and holders are the response copy buffers and their boxes
// (getBuffer).
var buffers, holders sync.Pool

// firstBodyBuffer is the most a body buffer starts with: a prompt usually
// fits, and a client that announces a large body and sends nothing holds
// no more than this.
const firstBodyBuffer = 16 << 10

// readBody reads a request body of at most limit bytes. The buffer grows
// as bytes arrive, at most doubling what has arrived: a Content-Length
// only keeps an honest client's buffer from growing past its body, it
// never has one allocated ahead of the bytes. It does take one for the
// whole declared body ahead of them when a pool has one idle (a later
// turn's prompt is about as long as the turns before it): memory the
// process has already, which spares the growth its copies, and which a
// client that announces large bodies and sends nothing can hold only as
// much of as the pools hold. With idle > 0 the read fails once
// idle passes without a byte (a read deadline on the connection, moved on
// lazily, coarse.IdleDeadline: between idle and 1.5 idle after the last
// byte, and a timer update per idle/2 rather than per read; cleared at
// the end, since the server reads on after the handler has the body to
// notice a client that goes away).
// The buffers come from bodyBuffer: the caller gives the body's back
// with freeBodyBuffer once nothing reads it (bodybuf.go).
func readBody(w http.ResponseWriter, r *http.Request, limit int64, idle time.Duration) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var rc *http.ResponseController
	deadline := coarse.IdleDeadline{D: idle}
	if idle > 0 && !buffered(r.Body) {
		rc = http.NewResponseController(w)
		defer rc.SetReadDeadline(time.Time{})
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	declared := r.ContentLength
	first := int64(firstBodyBuffer)
	var buf []byte
	if declared >= 0 {
		first = min(first, declared)
		if declared > first && declared <= limit {
			buf, _ = pooledBodyBuffer(int(declared))
		}
	}
	if buf == nil {
		buf = bodyBuffer(int(min(first, limit+1)))
	}
	for {
		var err error
		switch {
		case len(buf) < cap(buf):
			if rc != nil {
				// ErrNotSupported (a writer that hides the connection)
				// leaves the read without a deadline; the server's own
				// still apply.
				if t, ok := deadline.Next(time.Now()); ok {
					_ = rc.SetReadDeadline(t)
				}
			}
			var n int
			n, err = body.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
		case int64(len(buf)) == declared && declared > 0:
			// Every declared byte is in and fills the buffer: the end is
			// one more read, into the buffer's last byte (its value kept
			// aside) rather than a larger buffer or a byte of its own,
			// which the interface call would move to the heap.
			last := len(buf) - 1
			kept := buf[last]
			var n int
			n, err = body.Read(buf[last:])
			extra := buf[last]
			buf[last] = kept
			if n > 0 {
				// A body longer than it said (net/http's framing ends
				// one at its length; another reader might not): read on
				// as one of unknown length.
				declared = -1
				buf = append(growBody(buf, declared), extra)
			}
		default:
			buf = growBody(buf, declared)
			continue
		}
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}

// growBody moves a full body buffer's bytes to one twice its size, or
// the declared length's when that is less, and frees the full one.
func growBody(buf []byte, declared int64) []byte {
	grow := int64(2 * cap(buf))
	if declared > int64(len(buf)) {
		grow = min(grow, declared)
	}
	next := append(bodyBuffer(int(grow)), buf...)
	freeBodyBuffer(buf) // its bytes are next's now
	return next
}

// buffered reports whether a request body is one the server already
// holds whole (sidecar/downstream's says so), which reading waits for
// nothing and so needs no deadline: a clock read, an allocation and two
// timer updates per request spared.
func buffered(body io.ReadCloser) bool {
	if body == nil || body == http.NoBody {
		return true
	}
	b, ok := body.(interface{ Buffered() bool })
	return ok && b.Buffered()
}

// ServeHTTP forwards one request. Whichever way it ends (an early error
// answer, a proxied response, a client or a backend gone mid-stream), it
// is logged and counted once, by the exchange's deferred finish.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{recorder: recorder{ResponseWriter: w}, h: h, in: r, start: h.o.Now()}
	if l, ok := w.(upstream.HeadLender); ok {
		x.heads = l.ResponseHeads()
		x.listing, x.heads.Listed = w.(fieldsWriter)
	}
	if l, ok := w.(fieldLister); ok {
		x.inFields, x.fieldsIn = l.RequestFields(r)
	}
	defer x.finish()
	x.identify()
	body, err := readBody(w, r, h.o.MaxBodyBytes, h.o.BodyReadTimeout)
	x.reqBytes = body // freed by finish (freeBody)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(x, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", h.o.MaxBodyBytes))
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The rest of the body may still come: the connection cannot
			// carry another request.
			x.Header().Set("Connection", "close")
			writeError(x, http.StatusRequestTimeout, fmt.Sprintf("request body: no byte for %s", h.o.BodyReadTimeout))
		default:
			writeError(x, http.StatusBadRequest, "reading request body: "+err.Error())
		}
		return
	}
	x.body.Reset(h.o.Body, body)
	x.fields = &x.body
	x.ctx = exchangeContext{Context: r.Context(), x: x}
	x.req = *r.WithContext(&x.ctx) // the handler's own copy, the backends' request to be
	r = &x.req
	pool, status, msg := h.pool(x.fields)
	if pool == nil {
		writeError(x, status, msg)
		return
	}
	x.pool = pool
	var d *resolve.Decision
	if x.fieldsIn && pool.bounded == nil {
		x.unlist(r)
	}
	if x.fieldsIn {
		x.view.Reset(r.Method, r.URL, x.inFields, x.fields)
		d, err = pool.Resolver.ResolveViewInto(r.Context(), &x.view, &x.decision)
	} else {
		d, err = pool.Resolver.ResolveInto(r.Context(), r, &x.decision)
	}
	if lost, ok := errors.AsType[*responses.LostError](err); ok {
		lost.Write(x) // its backend is gone: no other can answer
		return
	}
	if err != nil {
		x.Header().Set("Retry-After", "1")
		// Resolve's errors name no backend (ErrNoBackend); keep it so. A
		// pool that is down says why (its ModelServer is gone), which
		// names none either and was logged once when it went down.
		switch {
		case errors.Is(err, resolve.ErrUnavailable):
			writeError(x, http.StatusServiceUnavailable, "pool "+pool.Name+": "+err.Error())
		default:
			writeError(x, http.StatusServiceUnavailable, "pool "+pool.Name+": no selectable backend")
			if !errors.Is(err, resolve.ErrNoBackend) {
				h.o.AccessLog.Warn("resolve failed", "pool", pool.Name, "err", err)
			}
		}
		return
	}
	x.forward(d, r, body)
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
func sameHeaderName(a, b string) bool { return foldEqual(a, b, true) }

// asciiFold reports whether a and b are equal but for ASCII letter case.
func asciiFold(a, b string) bool { return foldEqual(a, b, false) }

// foldEqual compares a and b with ASCII letters in either case equal,
// and '_' and '-' too with underscores.
func foldEqual(a, b string, underscores bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i], underscores) != fold(b[i], underscores) {
			return false
		}
	}
	return true
}

func fold(c byte, underscores bool) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_' && underscores:
		return '-'
	}
	return c
}

// respond notes that the backend answered, watches the body it streams
// (and, for a stored response, lets the resolver learn its id), writes
// the session tokens of the decision that answered (after a retry, the
// second one) in h, replacing any a backend set there, and adds its
// token cookie beside the backend's own cookies. h is the response's
// header, or for a listed response the client's (the backend's token
// fields are then left out: forwardable).
func (x *exchange) respond(resp *http.Response, h http.Header) {
	x.answeredOrNot()
	x.answered(resp)
	for _, t := range x.d.Tokens {
		h.Set(t.Name, t.Value)
	}
	x.pool.Resolver.Answered(x.d, resp)
	for _, c := range x.d.Cookies {
		h.Add("Set-Cookie", c)
	}
}

// target aims out at x's current decision.
func target(out *http.Request, x *exchange) {
	out.URL.Scheme = "http"
	out.URL.Host = x.d.Backend.Addr
	out.Host = x.d.Backend.Addr
	if x.fieldsIn {
		x.targetFields()
		return
	}
	if ph := x.pool.PrefillHeader; ph != "" {
		out.Header.Del(ph) // never a client's value
		if x.d.Prefill.Addr != "" {
			out.Header.Set(ph, x.d.Prefill.Addr)
		}
	}
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
// reach the real writer.
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
	r.noteStatus(code)
	r.ResponseWriter.WriteHeader(code)
}

// noteStatus records a status about to be written.
func (r *recorder) noteStatus(code int) {
	if r.code == 0 && code >= 200 {
		r.code = code
	}
	r.wrote = true
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

// FlushError flushes to the client; every event of a stream is flushed
// through it.
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
