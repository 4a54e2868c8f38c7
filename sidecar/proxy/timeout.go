package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/upstream"
)

// firstByteTransport bounds each attempt's wait for the backend's
// response headers: the decision's Timeout (a ModelServer's
// trafficPolicy.timeout) when it has one, the pool's firstByteTimeout
// otherwise.
type firstByteTransport struct {
	base http.RoundTripper
	pool *Pool // its bounded is base, when base bounds the wait itself
}

// headerTimeoutTransport is a transport that bounds the wait for the
// response headers itself (sidecar/upstream, the data path's): a read
// deadline on its connection, where any other transport needs a clock
// of the proxy's (headerClock) and a cancelable context per attempt.
type headerTimeoutTransport interface {
	RoundTripHeaderTimeout(req *http.Request, d time.Duration) (*http.Response, error)
}

func (t firstByteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	d := t.pool.FirstByteTimeout
	x, _ := req.Context().Value(exchangeKey{}).(*exchange)
	if x != nil && x.d != nil && x.d.Timeout > 0 {
		d = x.d.Timeout
	}
	if b := t.pool.bounded; b != nil && d > 0 {
		resp, err := b.RoundTripHeaderTimeout(req, d)
		if errors.Is(err, upstream.ErrHeaderTimeout) {
			return nil, headerTimeoutError{d}
		}
		return resp, err
	}
	if x != nil && x.clock.hooked {
		return x.clock.roundTrip(req, d, t.base.RoundTrip)
	}
	return withHeaderTimeout(req, d, t.base.RoundTrip)
}

// headerTimeoutError is an attempt's first-byte timeout running out
// before the backend's response headers arrived. It is a timeout, so the
// request is answered 504.
type headerTimeoutError struct{ d time.Duration }

func (e headerTimeoutError) Error() string {
	return fmt.Sprintf("no response headers within %s of sending the request", e.d)
}
func (headerTimeoutError) Timeout() bool { return true }

// withHeaderTimeout runs rt on req and cancels it when no response headers
// arrive within d of the request being written (the transport's
// ResponseHeaderTimeout, but per request). The body is not bounded: a
// stream may run as long as it runs. d <= 0 runs rt as it is. A request
// of an exchange uses the exchange's clock (firstByteTransport); this one
// is the same clock on its own, with a trace of its own.
func withHeaderTimeout(req *http.Request, d time.Duration, rt func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if d <= 0 {
		return rt(req)
	}
	c := &headerClock{}
	tr := &httptrace.ClientTrace{}
	c.hook(tr)
	return c.roundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), tr)), d, rt)
}

// headerClock is one request's first-byte clock, attempt after attempt,
// for a transport that cannot bound the wait itself (the sidecar's data
// path uses sidecar/upstream's read deadline instead: see
// headerTimeoutTransport). It lives in the request's exchange, and its
// WroteRequest hook in the exchange's trace, so an attempt costs no
// closure, trace or context value of its own: one cancelable context
// and, on the first attempt only, one timer.
type headerClock struct {
	// hooked: wrote is the WroteRequest hook of the trace the requests
	// carry.
	hooked bool

	mu sync.Mutex
	d  time.Duration
	// running: an attempt is waiting for its response headers; started:
	// its request was written and the clock runs until deadline; fired:
	// the deadline passed first and the attempt was canceled.
	running, started, fired bool
	deadline                time.Time
	timer                   *time.Timer // made on the first start, reset later
	cancel                  context.CancelFunc
	body                    cancelOnClose // the current attempt's response body
}

// hook makes t's WroteRequest start the clock.
func (c *headerClock) hook(t *httptrace.ClientTrace) {
	t.WroteRequest = c.wrote
	c.hooked = true
}

// roundTrip is withHeaderTimeout with c as the attempt's clock.
func (c *headerClock) roundTrip(req *http.Request, d time.Duration, rt func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if d <= 0 {
		return rt(req)
	}
	ctx, cancel := context.WithCancel(req.Context())
	c.mu.Lock()
	c.d, c.cancel, c.running, c.started, c.fired = d, cancel, true, false, false
	c.mu.Unlock()
	resp, err := rt(req.WithContext(ctx))
	c.mu.Lock()
	c.running = false
	if c.timer != nil {
		c.timer.Stop()
	}
	timedOut := c.fired
	c.mu.Unlock()
	if timedOut && req.Context().Err() == nil {
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		return nil, headerTimeoutError{d}
	}
	if err != nil || resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection's body must stay the transport's own
		// (a proxy writes to it); the request's end releases ctx.
		if err != nil {
			cancel()
		}
		return resp, err
	}
	c.body = cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	resp.Body = &c.body
	return resp, nil
}

// wrote starts the clock once the request is written; a backend that
// answers before reading all of it stops it before it starts. (A write
// of an earlier, failed attempt that ends during a retry may start the
// retry's clock that much early.)
func (c *headerClock) wrote(httptrace.WroteRequestInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running || c.started {
		return
	}
	c.started = true
	c.deadline = time.Now().Add(c.d)
	if c.timer == nil {
		c.timer = time.AfterFunc(c.d, c.fire)
	} else {
		c.timer.Reset(c.d)
	}
}

// fire cancels the waiting attempt. The deadline check ignores a firing
// of an earlier attempt's clock that was already under way when that
// attempt ended.
func (c *headerClock) fire() {
	c.mu.Lock()
	fire := c.running && c.started && !time.Now().Before(c.deadline)
	c.fired = c.fired || fire
	cancel := c.cancel
	c.mu.Unlock()
	if fire {
		cancel()
	}
}

// cancelOnClose releases the request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
