package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/logjson"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/reqbody"
	"github.com/tetherproxy/tether/sidecar/reqview"
	"github.com/tetherproxy/tether/sidecar/resolve"
	"github.com/tetherproxy/tether/sidecar/upstream"
	"github.com/tetherproxy/tether/sidecar/usage"
)

// Outcomes: how a request ended, the outcome label of
// tether_requests_total and the access log's "outcome".
const (
	// Completed: the whole response reached the client (whatever its
	// status, an error the sidecar answered itself included).
	Completed = "completed"
	// ClientClosed: the client went away before the response ended, or
	// took no byte of it for the stream idle timeout.
	ClientClosed = "client_closed"
	// UpstreamReset: the backend's connection failed before or while it
	// answered (502, or a stream cut short).
	UpstreamReset = "upstream_reset"
	// Timeout: the backend sent no response headers within the pool's
	// first-byte timeout (504), or, for the stream idle timeout, took no
	// byte of the request (504) or sent none of its response body (the
	// stream cut short); the access log's error says which.
	Timeout = "timeout"
)

// exchange is one request, from its arrival to its access-log line: the
// state ServeHTTP owns and finish accounts for, once. Each attempt
// writes the response through it (its recorder sees status, bytes and the
// client's write errors), and the outbound request's context carries it
// to the transport (the attempt's first-byte timeout) and the trace's
// hooks, which only record what happened. Whether to try again is
// decided in forward alone.
type exchange struct {
	recorder
	h     *Handler
	in    *http.Request
	start time.Time
	// requestID is the client's X-Request-Id, or the one generated (and
	// forwarded) for it; traceparent the W3C trace context, if any.
	requestID, traceparent string
	idValues               [1]string // the header's values of a generated id
	idBytes                [36]byte  // a generated id's bytes, which requestID is

	pool     *Pool
	d        *resolve.Decision // the current attempt's
	decision resolve.Decision  // the first attempt's, made here
	held     string            // the backend the balancer counts the current attempt on; "" for none
	reqBytes []byte            // the request body, in a buffer of bodyBuffer's
	bodyLent bool              // reqBytes went to a transport that may read it later: never freed
	reqBody  bodyReader        // reqBytes, read by the current attempt
	fields   *reqbody.Body     // the body's fields, parsed once: &body once the body is read, nil before
	body     reqbody.Body
	// ctx is the request's context as the handler passes it on (to the
	// resolver and the transport), answering for the exchange's values;
	// req is the client's request with it, the handler's own copy (in
	// the exchange's allocation), which becomes the backends' request.
	ctx exchangeContext
	req http.Request
	// pinned: the resolver refused to move the request (resolve.ErrPinned:
	// the stored response it names is on its backend only).
	pinned bool

	// The current attempt.
	sent   time.Time     // handed to the transport
	header time.Duration // until the response headers; 0 without them
	status int           // the backend's status; 0 without a response
	conn   bool          // a connection to the backend was obtained
	reused bool          // ... one that had carried requests before
	upErr  error         // the round trip failed: no response
	upBody upstreamBody  // the backend's response body, watched
	// usage reads the token usage the backend reports from its response
	// body as it streams by (upBody.scan points here when it is read).
	usage usage.Scanner
	done  bool // the response was relayed to its end

	// unanswered: the current attempt is counted in the balancer's
	// Unanswered (sent, no response headers yet).
	unanswered bool
	// timed: the current attempt is a stream the cost policy times (the
	// balancer's Due): its first token is due at due. firstToken is the
	// time to its first token (the stream's first body bytes); 0 before.
	timed      bool
	due        time.Time
	firstToken time.Duration

	// The attempts that failed before any response byte and were
	// retried, in order.
	retried  [maxRetries]failedAttempt
	nRetried int
	// noRetry says why a retryable failure was not retried (no other backend).
	noRetry error

	// The outbound request's parts of its own (outbound): its URL and the
	// X-Forwarded-For and -Host values it may set.
	outURL   url.URL
	xff, xfh [1]string
	// fieldsIn: the client's request came listed (its server's
	// RequestFields), with an empty Header: inFields are its fields,
	// edited in place into outFields (outboundFields), and sendFields
	// the current attempt's (targetFields), which the transport writes
	// (OutboundFields). view is the request as routing reads it then.
	fieldsIn   bool
	inFields   []httphead.Field
	outFields  []httphead.Field
	sendFields []httphead.Field
	view       reqview.Head
	// informational guards the client's headers from a 1xx response a
	// transport reports from its own goroutine (got1xx) after the round
	// trip returned: roundTripping is set while one runs.
	informational sync.Mutex
	roundTripping bool

	// heads is where the transport parses each attempt's response head:
	// the client connection's, when its server lends them (ResponseHeads).
	heads *httphead.Responses
	// listing is the client's writer when it sends listed fields: heads
	// are then parsed Listed, and a response parsed so is relayed
	// without a header map (attempt).
	listing fieldsWriter

	trace httptrace.ClientTrace
	// clock is the first-byte timeout when the pool's transport cannot
	// bound the wait itself (Pool.bounded is nil); its hook is then in trace.
	clock headerClock
}

// maxRetries bounds the retries of one request. Each goes to a backend
// the request has not failed on, and at most one follows a first-byte
// timeout (the client waits at most two of them). One retry is the rule;
// the second is for the retry that met another faulty backend, which
// this replica could not know of yet (it sent it nothing since it broke):
// two backends failing at once cost no request.
const maxRetries = 2

// failedAttempt is an attempt that was retried: why, and on which backend.
type failedAttempt struct {
	reason resolve.Reason
	pod    string
}

type exchangeKey struct{}

// exchangeContext is the client's request context (its cancellation,
// deadline and values) with the exchange's own values answered from the
// exchange: the body's fields (body sources, the pool's model), the
// exchange itself (the first-byte timeout) and the round trip's Observer
// (upstream's hooks). A context.WithValue for each, and an
// httptrace.ClientTrace with a closure per hook, cost five allocations
// per request and a longer chain for every lookup. It lives in the
// exchange; the cancelation of contexts made from it still takes
// context's own path (Value passes context's private keys on to the
// client's context, so a child finds its cancelCtx).
type exchangeContext struct {
	context.Context
	x *exchange
}

func (c *exchangeContext) Value(key any) any {
	switch key.(type) {
	case reqbody.ContextKey:
		return c.x.fields
	case exchangeKey:
		return c.x
	case upstream.ObserverKey:
		return c.x
	}
	return c.Context.Value(key)
}

// bodyReader is the request body as an attempt's transport reads it:
// io.NopCloser would box the reader anew for every attempt.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// upstreamBody is the backend's response body as the attempt reads
// it; err is the first read error other than its end. scan, when set,
// sees every byte read, before the client does.
type upstreamBody struct {
	io.ReadCloser
	err  error
	scan *usage.Scanner
	x    *exchange // notes a timed stream's first token
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.x.timed {
		now := b.x.h.o.Now()
		b.x.firstToken = now.Sub(b.x.sent)
		b.x.untimed(now)
	}
	if b.scan != nil && n > 0 {
		b.scan.Write(p[:n])
	}
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// forward proxies the request to d's backend. An attempt that failed
// before any response byte (a refused connection, a connection closed or
// reset before the answer began, no response headers within the
// first-byte timeout) is retried on another backend (at most maxRetries
// times), unless the resolver pins the request to the first
// (resolve.ErrPinned). Every attempt's result goes to the pool's outlier
// detection.
//
// r is the handler's copy of the client's request, carrying x.ctx: it
// becomes the backends' request (outbound), while x.in stays as the
// client sent it, for the access log.
func (x *exchange) forward(d *resolve.Decision, r *http.Request, body []byte) {
	p := x.pool
	if p.bounded == nil {
		// A transport other than upstream learns nothing of an Observer,
		// and the first-byte clock lives in the trace's hooks; it may
		// read the body after its round trip (bodybuf.go).
		x.bodyLent = true
		x.trace.GotConn = x.GotConn
		x.trace.Got1xxResponse = x.Got1xxResponse
		x.clock.hook(&x.trace)
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), &x.trace))
	}
	inflight := p.m.inFlight()
	inflight.Inc()
	defer inflight.Dec()
	out, err := x.outbound(r, body)
	for {
		x.begin(d)
		if err != nil {
			x.upErr = err // a request no backend may see
		} else {
			x.attempt(out)
		}
		x.answeredOrNot()
		x.untimed(time.Time{})
		if x.upErr == nil {
			x.done = true // (a stream cut short panics out of ServeHTTP instead)
			return
		}
		kind, reason := x.failed()
		if kind != "" {
			p.Outliers.Failure(x.d.Backend.ID, kind)
		}
		if reason == "" || !x.mayRetry(reason) {
			break
		}
		nd, err := p.Resolver.Retry(x.in.Context(), x.d, reason)
		if errors.Is(err, resolve.ErrPinned) {
			x.pinned = true
			break
		}
		if err != nil {
			x.noRetry = err
			break
		}
		p.m.retries[reason]().Inc()
		x.retried[x.nRetried] = failedAttempt{reason, x.d.Backend.Name}
		x.nRetried++
		d = nd
	}
	x.answerFailure()
}

// mayRetry reports whether the retry budget allows another retry for
// reason: fewer than maxRetries so far, and one after a timeout at most.
func (x *exchange) mayRetry(reason resolve.Reason) bool {
	if x.nRetried == maxRetries {
		return false
	}
	for _, a := range x.retried[:x.nRetried] {
		if a.reason == resolve.ReasonTimeout && reason == resolve.ReasonTimeout {
			return false
		}
	}
	return true
}

// retryAttrs are the access log's retry_reason and failed_pod: the
// retried attempts' reasons and backends, in order, comma-separated.
func (x *exchange) retryAttrs() (reasons, pods string) {
	for i, a := range x.retried[:x.nRetried] {
		if i > 0 {
			reasons, pods = reasons+",", pods+","
		}
		reasons, pods = reasons+string(a.reason), pods+a.pod
	}
	return reasons, pods
}

// begin starts an attempt on d.
func (x *exchange) begin(d *resolve.Decision) {
	x.unhold()
	x.d = d
	x.held = d.Backend.ID
	x.pool.Balancer.Hold(x.held)
	x.pool.Balancer.Sent(d.Backend.ID)
	x.pool.Balancer.Carry(d.Backend.ID, len(x.reqBytes))
	x.unanswered = true
	x.conn, x.reused, x.upErr, x.status, x.header, x.firstToken = false, false, nil, 0, 0, 0
	x.sent = x.h.o.Now()
	if prefill, ok := x.pool.Resolver.FirstTokenDue(d); ok {
		x.timed, x.due = true, x.sent.Add(prefill)
		x.pool.Balancer.Due(d.Backend.ID, x.due)
	}
}

// unhold ends the balancer's count of the current attempt, if any.
func (x *exchange) unhold() {
	if x.held != "" {
		x.pool.Balancer.Release(x.held)
		x.held = ""
	}
}

// answeredOrNot ends the current attempt's count of unanswered requests:
// its response headers arrived, or it ended without them.
func (x *exchange) answeredOrNot() {
	if x.unanswered {
		x.unanswered = false
		x.pool.Balancer.Answered(x.d.Backend.ID)
	}
}

// untimed ends the current attempt's timing (Balancer.Due): its first
// token arrived at arrived, or (zero) it ended without one, or is no
// stream.
func (x *exchange) untimed(arrived time.Time) {
	if x.timed {
		x.timed = false
		x.pool.Balancer.Done(x.d.Backend.ID, x.due, arrived)
	}
}

// rewind is the outbound request's GetBody: the transport replays the
// body itself when a reused connection failed before anything was written.
func (x *exchange) rewind() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(x.reqBytes)), nil
}

// freeBody gives the request body's buffer back for later bodies, unless
// a transport that may still read it had it: the exchange is over, so
// its own parts read it no more, and none of them kept a slice of it.
func (x *exchange) freeBody() {
	if x.reqBytes == nil || x.bodyLent {
		return
	}
	x.body.Reset(nil, nil)
	x.reqBody.Reset(nil)
	freeBodyBuffer(x.reqBytes)
	x.reqBytes = nil
}

// GotConn notes the connection an attempt got (upstream.Observer).
func (x *exchange) GotConn(info httptrace.GotConnInfo) { x.conn, x.reused = true, info.Reused }

// answered is called with the backend's response headers.
func (x *exchange) answered(resp *http.Response) {
	x.header = x.h.o.Now().Sub(x.sent)
	x.status = resp.StatusCode
	if resp.StatusCode != http.StatusSwitchingProtocols { // an upgraded body must stay writable
		x.upBody = upstreamBody{ReadCloser: resp.Body, x: x}
		resp.Body = &x.upBody
		stream, ok := reportsUsage(resp)
		if ok {
			x.usage.Reset(stream)
			x.upBody.scan = &x.usage
		}
		if !stream { // a whole response (or an error) has no first token to wait for
			x.untimed(time.Time{})
		}
	}
}

// reportsUsage says whether resp may carry a token usage report (a
// successful JSON body, or an SSE stream whose last chunk may hold one),
// and whether it is a stream.
func reportsUsage(resp *http.Response) (stream, ok bool) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return false, false
	}
	switch mediaType(resp.Header.Get("Content-Type")) {
	case "text/event-stream":
		return true, true
	case "application/json":
		return false, true
	}
	return false, false
}

// reported returns the usage the response reported, if any.
func (x *exchange) reported() (usage.Usage, bool) {
	if x.upBody.scan == nil {
		return usage.Usage{}, false
	}
	return x.usage.Usage()
}

// failed classifies the current attempt's failure: the kind outlier
// detection counts ("" for none: the client went away, or the request
// never reached the network) and the reason to retry it ("" for none).
// Only failures before any response byte are retried (within the budget
// of maxRetries, each on a backend not tried yet): a refused connection
// (nothing reached the backend), or a connection closed or reset before
// the answer began (HAProxy's retry-on conn-failure empty-response,
// Envoy's reset): a reused keep-alive one (the backend went away, or
// closed the idle connection as the request was sent) or a fresh one (a
// crashing worker). Nothing reached the client and a completion has no
// side effect beyond compute; should the request itself be what breaks
// backends, the budget bounds the harm, and outlier detection ejects a
// backend that keeps doing it. An attempt that got no response headers
// within its first-byte timeout is retried too, unless the pool says
// otherwise (Pool.RetryOnTimeout): Envoy's per-try timeout, HAProxy's
// retry-on response-timeout. The backend may still be computing, but a
// backend that is still silent after the timeout (generous for a prefill
// behind a queue) is more likely stuck than slow, and another one answers
// sooner than the client's patience ends; the client waits at most twice
// the timeout.
func (x *exchange) failed() (outlier.Kind, resolve.Reason) {
	var kind outlier.Kind
	var reason resolve.Reason
	switch err := x.upErr; {
	case x.in.Context().Err() != nil:
		return "", ""
	case isDialError(err):
		kind, reason = outlier.ConnectFailed, resolve.ReasonConnectFailed
	case isTimeout(err):
		kind = timeoutKind(err)
		if x.pool.RetryOnTimeout && errors.As(err, new(headerTimeoutError)) {
			reason = resolve.ReasonTimeout
		}
	case x.reused:
		kind, reason = outlier.EmptyResponse, resolve.ReasonEmptyResponse
	case x.conn:
		kind, reason = outlier.Reset, resolve.ReasonEmptyResponse
	default:
		return "", ""
	}
	if x.wrote {
		reason = ""
	}
	return kind, reason
}

// answerFailure answers a request whose last attempt got no response.
// The message names no backend (the access log does).
func (x *exchange) answerFailure() {
	switch {
	case x.in.Context().Err() != nil:
		x.code = 499 // nobody to answer; nginx's code for a closed client, for the log
	case isTimeout(x.upErr):
		writeError(x, http.StatusGatewayTimeout, "the backend timed out before answering")
	case x.noRetry != nil:
		writeError(x, http.StatusBadGateway, "the backend failed before answering, and no other backend is selectable")
	default:
		writeError(x, http.StatusBadGateway, "the backend failed before answering")
	}
}

// outcome says how the request ended, and the error that ended it early.
func (x *exchange) outcome() (string, error) {
	gone := x.in.Context().Err() != nil
	var err error
	switch {
	case x.clientErr != nil:
		return ClientClosed, x.clientErr
	case x.upErr != nil:
		err = x.upErr
	case x.upBody.err != nil:
		err = x.upBody.err
	case x.d != nil && !x.done:
		// The attempt aborted the stream (http.ErrAbortHandler) without
		// a read or write error of ours.
	default:
		return Completed, nil
	}
	switch {
	case gone:
		return ClientClosed, err
	case isTimeout(err) && !isDialError(err):
		return Timeout, err
	}
	return UpstreamReset, err
}

// report tells outlier detection how a response the backend sent ended
// (err: the error that ended it early).
func (x *exchange) report(outcome string, err error) {
	o, id := x.pool.Outliers, x.d.Backend.ID
	switch {
	case x.status >= 500:
		o.Failure(id, outlier.ServerError)
	case outcome == UpstreamReset:
		o.Failure(id, outlier.Reset)
	case outcome == Timeout:
		o.Failure(id, timeoutKind(err))
	case outcome == Completed:
		o.Success(id)
	}
}

// finish writes the access-log line and the request's metrics, and
// returns the balancer's count: once per request, however it ended.
func (x *exchange) finish() {
	x.freeBody()
	x.unhold()
	now := x.h.o.Now()
	elapsed := now.Sub(x.start)
	outcome, err := x.outcome()
	if x.status != 0 {
		x.report(outcome, err)
	}
	code := x.code
	if code == 0 {
		code = http.StatusOK
	}
	decision := "error" // no decision was made: the request failed before
	line := accessLines.Get().(*accessLine)
	defer accessLines.Put(line)
	attrs := append(line[:0], slog.String("request_id", x.requestID))
	if x.traceparent != "" {
		attrs = append(attrs, slog.String("traceparent", x.traceparent))
	}
	if x.pool != nil {
		attrs = append(attrs, slog.String("pool", x.pool.Name))
	}
	if d := x.d; d != nil {
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
		if x.nRetried > 0 {
			reasons, pods := x.retryAttrs()
			attrs = append(attrs, slog.Bool("retried", true), slog.String("retry_reason", reasons),
				slog.String("failed_pod", pods))
		}
		if x.pinned {
			attrs = append(attrs, slog.Bool("pinned", true))
		}
		if d.StoreError {
			attrs = append(attrs, slog.Bool("store_error", true))
		}
		if x.status != 0 {
			x.pool.m.upstream().Observe(x.header.Seconds())
			attrs = append(attrs, slog.Float64("upstream_header_ms", ms(x.header)))
		}
		if u, ok := x.reported(); ok {
			attrs = append(attrs, slog.Int64("prompt_tokens", u.PromptTokens))
			if u.HasCached {
				attrs = append(attrs, slog.Int64("cached_tokens", u.CachedTokens))
			}
			x.pool.m.usage.Observe(decision, u)
			x.pool.Resolver.Reported(d, resolve.Report{FirstToken: x.firstToken, Duration: elapsed, Usage: u})
		}
	}
	attrs = append(attrs,
		slog.String("method", x.in.Method),
		slog.String("path", x.in.URL.Path),
		slog.Int("status", code),
		slog.String("outcome", outcome),
		slog.Int64("bytes", x.bytes),
		slog.Float64("duration_ms", ms(elapsed)),
	)
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	x.h.logAccess(x.in.Context(), now, attrs)
	if x.pool == nil {
		x.h.noPool.Inc(decision, code, outcome)
		return
	}
	m := &x.pool.m
	m.requests.Inc(decision, code, outcome)
	m.bytes().Add(float64(x.bytes))
	m.duration().Observe(elapsed.Seconds())
}

// logAccess writes the access line: Logger.LogAttrs without the call
// stack walk it makes for every record (runtime.Callers, for a source
// position no access line prints), a percent of the sidecar's CPU per
// request in a perf profile.
func (h *Handler) logAccess(ctx context.Context, now time.Time, attrs []slog.Attr) {
	lh := h.o.AccessLog.Handler()
	if !lh.Enabled(ctx, slog.LevelInfo) {
		return
	}
	_ = logjson.HandleAttrs(ctx, lh, now, slog.LevelInfo, "request", attrs)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// timeoutKind is the failure kind of a backend's timeout: the stream
// idle timeout's, or the first-byte timeout's.
func timeoutKind(err error) outlier.Kind {
	if upstream.IsStreamIdle(err) {
		return outlier.StreamIdle
	}
	return outlier.Timeout
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}

// isDialError reports whether err happened while connecting (the dial
// guard's refusal included), so no byte reached a backend.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ResponseHeads lends the transport where to parse the backend's
// response head (upstream.HeadLender): the client connection's, which
// its next request reuses once this handler has returned; nil (new ones
// each time) when the server lends none.
func (x *exchange) ResponseHeads() *httphead.Responses { return x.heads }

var (
	_ upstream.Observer   = (*exchange)(nil)
	_ upstream.HeadLender = (*exchange)(nil)
)
