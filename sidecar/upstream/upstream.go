// Package upstream is the proxy's HTTP/1.1 client to model servers: an
// http.RoundTripper that makes each round trip on the caller's goroutine.
// It takes an idle connection (or dials one), writes the request, reads
// the response headers, and returns the body wired to give the
// connection back once it is read to its end.
//
// net/http's Transport does the same work with two goroutines per
// connection and channel hand-offs per request, so a request wakes three
// goroutines where this wakes one; on a sidecar's hot path, at a
// thousand requests a second, those wake-ups are CPU that every router
// pod pays (README "The hop's cost"). The wire format stays net/http's
// own: requests are written as Request.Write writes them and responses
// read as ReadResponse reads them (httphead parses a head of the common
// shape in place, into the same response), so framing, chunking,
// trailers and 1xx responses are the standard library's.
//
// What it does not do, since the proxy needs none of it: TLS, HTTP/2,
// proxies from the environment, compression, Expect: 100-continue waits
// (the body is sent at once; a 100 Continue is skipped), and the
// connection trace hooks other than GotConn, WroteRequest and
// Got1xxResponse (the first and last also as an Observer, hooks.go).
package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/coarse"
)

// Options configure a Transport.
type Options struct {
	// Dial connects to host:port (net.Dialer.DialContext, or a guard in
	// front of it). Required.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost bounds the idle connections kept per backend; the
	// rest are closed when their request ends. 0: 256.
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle for longer (before the backend
	// does: uvicorn closes after 5 s), at its next use or by a sweep
	// every IdleTimeout while connections are idle. 0: 4 s.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a response's header block (with its 1xx
	// responses); a backend that sends more gets its connection closed
	// and the attempt fails. 0: 1 MiB.
	MaxHeaderBytes int64
	// StreamIdleTimeout bounds each wait of a round trip for the backend
	// to take a byte of the request or send one of the response's body
	// (the wait for the headers is the round trip's header timeout): past
	// it the connection is closed and the write or read fails with a
	// timeout error (IsStreamIdle). 0: no bound. The deadline is moved
	// lazily (coarse.IdleDeadline): a wait fails 1 to 1.5 times it after
	// the last byte.
	StreamIdleTimeout time.Duration
}

// Transport is an HTTP/1.1 RoundTripper with a keep-alive pool per
// backend. Safe for concurrent use.
type Transport struct {
	o Options

	mu   sync.Mutex
	idle map[string][]*conn // per host:port, oldest first
	// sweeping: a sweep is due (one timer per Transport, armed while
	// connections are idle).
	sweeping bool
}

// New returns a Transport.
func New(o Options) *Transport {
	if o.MaxIdlePerHost <= 0 {
		o.MaxIdlePerHost = 256
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 4 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 1 << 20
	}
	return &Transport{o: o, idle: make(map[string][]*conn)}
}

// RoundTrip sends req and returns the response with its headers; the
// body streams from the connection. Canceling req's context closes the
// connection, before or after the headers.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.RoundTripHeaderTimeout(req, 0)
}

// ErrHeaderTimeout is the error of a round trip whose response headers
// did not arrive in time (RoundTripHeaderTimeout). It is a timeout.
var ErrHeaderTimeout error = headerTimeout{}

type headerTimeout struct{}

func (headerTimeout) Error() string   { return "upstream: no response headers in time" }
func (headerTimeout) Timeout() bool   { return true }
func (headerTimeout) Temporary() bool { return true }

// idlePkg names this package in its coarse.IdleErrors, which tells them
// from those of the client's side (package downstream's).
const idlePkg = "upstream"

// IsStreamIdle reports whether err is a round trip's or a response
// body's that Options.StreamIdleTimeout ended (a coarse.IdleError of
// this package's).
func IsStreamIdle(err error) bool {
	var e coarse.IdleError
	return errors.As(err, &e) && e.Pkg == idlePkg
}

// RoundTripHeaderTimeout is RoundTrip with the wait for the response
// headers bounded by d, counted from the moment the request, body
// included, is written: a read deadline on the connection, cleared when
// the headers arrive, so the body may stream as long as it streams. When
// it passes, the connection is closed and the error is ErrHeaderTimeout.
// d <= 0: no bound. A deadline on the connection costs the request no
// context, goroutine or timer of its own.
func (t *Transport) RoundTripHeaderTimeout(req *http.Request, d time.Duration) (*http.Response, error) {
	addr, err := hostPort(req.URL)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	h := hooksOf(ctx)
	c, err := t.get(ctx, addr)
	if err != nil {
		closeBody(req)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	h.gotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: c.reused, WasIdle: c.reused})
	return c.roundTrip(ctx, req, h, d)
}

// hostPort is the address a request URL names, with HTTP's default port.
func hostPort(u *url.URL) (string, error) {
	if u == nil || u.Scheme != "http" {
		scheme := ""
		if u != nil {
			scheme = u.Scheme
		}
		return "", fmt.Errorf("upstream: scheme %q is not supported (http only)", scheme)
	}
	if u.Host == "" {
		return "", errors.New("upstream: request URL has no host")
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	return net.JoinHostPort(u.Hostname(), "80"), nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// get returns an idle connection to addr that the backend has not closed,
// or a new one.
func (t *Transport) get(ctx context.Context, addr string) (*conn, error) {
	for {
		c := t.popIdle(addr)
		if c == nil {
			break
		}
		if c.alive() {
			c.reused = true
			c.lend()
			return c, nil
		}
		c.nc.Close()
	}
	nc, err := t.o.Dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newConn(t, addr, nc), nil
}

// popIdle takes the most recently used idle connection to addr, closing
// those idle for too long.
func (t *Transport) popIdle(addr string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.idle[addr]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	cs[len(cs)-1] = nil
	cs = cs[:len(cs)-1]
	if time.Since(c.idleSince) > t.o.IdleTimeout {
		// The rest are older still.
		for i, old := range cs {
			old.nc.Close()
			cs[i] = nil
		}
		cs = cs[:0]
		t.idle[addr] = cs
		c.nc.Close()
		return nil
	}
	t.idle[addr] = cs
	return c
}

// putIdle keeps c for the next request to its backend, closing the
// oldest idle connection beyond the cap and those idle for too long.
func (t *Transport) putIdle(c *conn) {
	c.giveBack()
	now := time.Now()
	c.idleSince = now
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := append(t.idle[c.addr], c)
	drop := 0
	for drop < len(cs)-1 && (len(cs)-drop > t.o.MaxIdlePerHost || now.Sub(cs[drop].idleSince) > t.o.IdleTimeout) {
		drop++
	}
	t.idle[c.addr] = closeOldest(cs, drop)
	if !t.sweeping {
		t.sweeping = true
		time.AfterFunc(t.o.IdleTimeout, t.sweep)
	}
}

// sweep closes the connections idle past IdleTimeout, so that a pool no
// request touches any more (the load went, a backend left) does not keep
// its sockets open; it runs again while any connection is idle.
func (t *Transport) sweep() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, cs := range t.idle {
		drop := 0
		for drop < len(cs) && now.Sub(cs[drop].idleSince) > t.o.IdleTimeout {
			drop++
		}
		if cs = closeOldest(cs, drop); len(cs) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = cs
		}
	}
	if len(t.idle) == 0 {
		t.sweeping = false
		return
	}
	time.AfterFunc(t.o.IdleTimeout, t.sweep)
}

// closeOldest closes the first n of the idle connections cs (oldest
// first) and returns the rest, in cs's array.
func closeOldest(cs []*conn, n int) []*conn {
	if n == 0 {
		return cs
	}
	for _, c := range cs[:n] {
		c.nc.Close()
	}
	m := copy(cs, cs[n:])
	clear(cs[m:])
	return cs[:m]
}

// CloseIdleConnections closes every idle connection. Connections in use
// go on, and are kept when their requests end.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = make(map[string][]*conn)
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.nc.Close()
		}
	}
}
