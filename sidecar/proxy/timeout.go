package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// firstByteTransport bounds each attempt's wait for the backend's
// response headers: the decision's Timeout (a ModelServer's
// trafficPolicy.timeout) when it has one, the pool's firstByteTimeout
// otherwise.
type firstByteTransport struct {
	base http.RoundTripper
	pool *Pool
}

func (t firstByteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	d := t.pool.FirstByteTimeout
	if x, _ := req.Context().Value(exchangeKey{}).(*exchange); x != nil && x.d != nil && x.d.Timeout > 0 {
		d = x.d.Timeout
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
// stream may run as long as it runs. d <= 0 runs rt as it is.
func withHeaderTimeout(req *http.Request, d time.Duration, rt func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if d <= 0 {
		return rt(req)
	}
	ctx, cancel := context.WithCancel(req.Context())
	var (
		mu          sync.Mutex
		timer       *time.Timer
		done, fired bool
	)
	// The clock starts once the request is written; a backend that
	// answers before reading all of it stops it before it starts.
	wrote := func(httptrace.WroteRequestInfo) {
		mu.Lock()
		defer mu.Unlock()
		if done || timer != nil {
			return
		}
		timer = time.AfterFunc(d, func() {
			mu.Lock()
			fire := !done
			fired = fire
			mu.Unlock()
			if fire {
				cancel()
			}
		})
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: wrote})
	resp, err := rt(req.WithContext(ctx))
	mu.Lock()
	done = true
	if timer != nil {
		timer.Stop()
	}
	timedOut := fired
	mu.Unlock()
	if timedOut && req.Context().Err() == nil {
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		return nil, headerTimeoutError{d}
	}
	if err != nil || resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection's body must stay the transport's own
		// (ReverseProxy writes to it); the request's end releases ctx.
		if err != nil {
			cancel()
		}
		return resp, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
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
