package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// headerTimeoutError is a decision's header timeout (a ModelServer's
// trafficPolicy.timeout) running out before the backend's response
// headers arrived. It is a timeout, so the request is answered 504.
type headerTimeoutError struct{ d time.Duration }

func (e headerTimeoutError) Error() string {
	return fmt.Sprintf("no response headers within %s (the pool's timeout)", e.d)
}
func (headerTimeoutError) Timeout() bool { return true }

// withHeaderTimeout runs rt on req and cancels it when no response headers
// arrive within d, as Kthena's trafficPolicy.timeout bounds "connection
// setup, sending the request and waiting for the response headers". The
// body is not bounded: a stream may run as long as it runs. d <= 0 runs rt
// as it is.
func withHeaderTimeout(req *http.Request, d time.Duration, rt func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if d <= 0 {
		return rt(req)
	}
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(d, cancel)
	resp, err := rt(req.WithContext(ctx))
	if !timer.Stop() && req.Context().Err() == nil {
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
