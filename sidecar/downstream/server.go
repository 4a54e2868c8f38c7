// Package downstream is the proxy's HTTP/1.1 server for its clients (the
// router): it accepts connections, reads requests and hands each to an
// http.Handler on the connection's own goroutine, as upstream is the
// client side of the same hop.
//
// net/http's server does the same work and a little more per request: a
// cancelable context and a response whose header map is cloned when it
// is written, and, once the handler has the request body, a goroutine
// that reads the connection to notice a client going away, stopped by a
// read deadline in the past when the handler returns — three wake-ups
// and a system call for every request, however short. Here (on Linux) a
// connection is registered once with one epoll instance for the
// process, for its client's end of stream or an error, and a request's
// watch is a flag: no wake-up, system call or goroutine per request,
// short or long, and a client hanging up is noticed when it does (watch,
// poller_linux.go). Elsewhere the watch reads as net/http's does, but
// only for a request still running after WatchAfter: a short request (a
// proxied one answers in well under a millisecond of the sidecar's time)
// never pays for it. On a sidecar's hot path, at a thousand requests a
// second, those wake-ups are CPU that every router pod pays (README
// "The hop's cost").
//
// The wire format stays net/http's own: requests are read as
// http.ReadRequest reads them (framing, chunked bodies, header
// validation), so what a client may send is what net/http accepts: a
// head of the common shape that the buffer holds whole by httphead (the
// same request: fuzzed against ReadRequest), any other by ReadRequest
// itself. Responses are framed here: a known Content-Length is kept, a
// response that ends within its first 2 KiB gets one, anything else is
// chunked (close-delimited for an HTTP/1.0 client), trailers included.
//
// Connections are accepted one at a time behind the work already in
// (Serve yields after each accept, where net/http's loop takes every
// waiting connection at once; why is at the yield).
//
// What it does not do, since the proxy needs none of it: TLS, HTTP/2,
// hijacking (upgrades), and the ConnState and ConnContext hooks. Two
// requests are judged by their Host as http.ReadRequest leaves it, since
// it drops the header: an HTTP/1.1 request whose Host header is present
// but empty is refused (net/http accepts it), and one in absolute form
// (GET http://host/path) without a Host header is accepted (net/http
// refuses it).
package downstream

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherproxy/tether/sidecar/coarse"
)

// Server serves HTTP/1.1 on listeners. Set its fields before Serve.
type Server struct {
	Handler http.Handler
	// MaxHeaderBytes bounds a request's line and header block (plus 4 KiB,
	// as net/http allows); past it the client gets 431. 0: 1 MiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time from a request's first byte (a
	// connection's accept for its first request) to the end of its headers.
	// 0: none.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no next request for
	// longer. 0: none.
	IdleTimeout time.Duration
	// WriteIdleTimeout bounds each wait for a client to take a byte of
	// its response (one that stopped reading): past it the connection is
	// closed and the handler's write fails with a timeout error
	// (a coarse.IdleError). 0: none. The deadline is moved lazily
	// (coarse.IdleDeadline): a write fails 1 to 1.5 times it after the
	// client's last byte taken.
	WriteIdleTimeout time.Duration
	// WatchAfter is how long a request runs at least, its body read,
	// before a watch that reads (where the process has no poller, or the
	// connection no descriptor) reads its connection for the client going
	// away (which cancels the request's context); the read starts on the
	// next multiple of ten times it (package coarse), so at most 11 times
	// it after the body. 0: 5 ms (the read within 55 ms). On the poller
	// the watch costs a request nothing and starts with its body's end.
	WatchAfter time.Duration
	// Log receives handler panics and accept errors. nil: slog.Default().
	Log *slog.Logger
	// readWatch: watches read on a goroutine each even where the process
	// has its poller (the tests of that way, which other systems take).
	readWatch bool
	// ListRequests: a request of the common shape (httphead's) comes to
	// the handler with an empty Header, its fields listed instead, in the
	// order they came, for a handler that reads them through the
	// ResponseWriter (RequestFields: the proxy's lean path, docs/hop-cost.md
	// "A lean data path"). Any other request has its Header as ever.
	// Only for a handler that asks for the fields: one that reads the
	// Header alone would find it empty.
	ListRequests bool

	// base is every request's parent context, made once: it carries
	// http.ServerContextKey, by which ReverseProxy knows that a panic
	// (http.ErrAbortHandler) is how to cut a response it cannot finish.
	base     context.Context
	baseOnce sync.Once

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   atomic.Bool
	// serving counts the Serve calls that have not returned.
	serving sync.WaitGroup
}

// newConnGrace is how long a connection that has not sent its first
// request is spared by Shutdown: its client has just dialled and is about
// to send (net/http waits as long).
const newConnGrace = 5 * time.Second

// Serve accepts connections on ln and serves each on its own goroutine
// until Shutdown or Close, then returns http.ErrServerClosed. Any other
// accept failure is returned, except temporary ones (too many open
// files), which are retried after a pause.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		return http.ErrServerClosed
	}
	defer s.untrack(ln)
	clientPoller() // started with the first server, not by its first slow request
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if ne, ok := err.(interface{ Temporary() bool }); ok && ne.Temporary() {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				s.log().Warn("accept failed; retrying", "err", err, "in", pause)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		c := newConn(s, nc)
		if !s.add(c) {
			nc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
		// The new connection's goroutine, and the requests already in,
		// run before the next accept: the loop goes to the back of the
		// scheduler's queue. Accepting a burst of connections whole
		// (clients open one per request while the sidecar is slow, as at
		// a cold start) would start every one of their requests ahead of
		// the backends' answers to those before, so that none completes
		// and the clients open more. HAProxy bounds its accepts per loop
		// (tune.maxaccept) and nginx takes one per event (multi_accept
		// off) for the same reason.
		runtime.Gosched()
	}
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
	}
	s.listeners[ln] = struct{}{}
	s.serving.Add(1)
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
	s.serving.Done()
}

func (s *Server) add(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes idle connections, and waits until
// every connection has finished its request and closed, or ctx ends
// (then it returns ctx's error and leaves the rest to Close). A
// connection in a request answers it with "Connection: close".
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	wait := time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		if s.closeIdle() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			wait = min(2*wait, 500*time.Millisecond)
			t.Reset(wait)
		}
	}
}

// Close stops accepting and closes every connection at once.
func (s *Server) Close() error {
	s.stopAccepting()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
		c.watch.closed()
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) stopAccepting() {
	s.mu.Lock()
	s.closing.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	s.serving.Wait()
}

// closeIdle closes the connections waiting for a request and returns how
// many are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.closeIfIdle() {
			delete(s.conns, c)
		}
	}
	return len(s.conns)
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Server) baseContext() context.Context {
	s.baseOnce.Do(func() {
		// The value is what net/http would put there, for handlers that
		// read it: a server with this one's handler and limits.
		std := &http.Server{Handler: s.Handler, MaxHeaderBytes: s.MaxHeaderBytes,
			ReadHeaderTimeout: s.ReadHeaderTimeout, IdleTimeout: s.IdleTimeout}
		s.base = context.WithValue(context.Background(), http.ServerContextKey, std)
	})
	return s.base
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return coarse.Step / 10 // 5 ms, on a grid of coarse.Step (watchDelay)
}

// watchDelay is how long after now a watch armed now starts: WatchAfter,
// rounded up to the next point of a grid of ten times it (package
// coarse; 50 ms by default, upstream's grid for the first wait too), so
// that the timers of requests that end before theirs fall due together
// and wake an idle sidecar once per point, not once each.
func (s *Server) watchDelay(now time.Time) time.Duration {
	after := s.watchAfter()
	return coarse.Ceil(now.Add(after), 10*after).Sub(now)
}

func (s *Server) headerLimit() int64 {
	n := s.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	return int64(n) + 4096
}
