package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/sidecar/bufpool"
	"github.com/tetherproxy/tether/sidecar/coarse"
	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/peek"
)

// max1xx bounds the informational responses before the final one (as
// net/http's Transport does).
const max1xx = 5

// earlyResponseWait is how long a request whose body could not be
// written waits for the response the backend may have sent before it
// closed (a 413 for a body it refused): that answer is the request's.
const earlyResponseWait = 50 * time.Millisecond

// conn is one connection to a backend, used by one request at a time.
type conn struct {
	t         *Transport
	addr      string
	nc        net.Conn
	raw       syscall.RawConn // for alive; nil when nc has none
	in        limitReader     // nc, bounded while headers are read
	br        *bufio.Reader   // over in; lent for a round trip (nil while idle)
	bw        *bufio.Writer   // over out; lent until the request is sent
	out       sender          // nc, and the request's last write (send)
	reused    bool            // carried a request before this one
	idleSince time.Time
	prober    peek.Prober // alive's and answered's
	waiter    peek.Waiter // awaitAnswer's
	abortFn   func()      // abort, made once: a method value per request would be an allocation
	// aborted: the request's context was canceled and nc closed.
	aborted atomic.Bool
	// readIdle and writeIdle bound the waits of a response body's reads
	// and of a request's writes for the backend (Options.StreamIdleTimeout).
	readIdle, writeIdle coarse.IdleDeadline
}

func newConn(t *Transport, addr string, nc net.Conn) *conn {
	c := &conn{t: t, addr: addr, nc: nc}
	c.readIdle.D, c.writeIdle.D = t.o.StreamIdleTimeout, t.o.StreamIdleTimeout
	c.in.r = nc
	c.in.n = -1
	c.out.c = c
	c.out.fn = c.out.writeFD
	c.lend()
	c.abortFn = c.abort
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
			c.waiter.Init()
		}
	}
	return c
}

// lend gives c its buffered reader and writer, for a round trip.
func (c *conn) lend() {
	c.br = bufpool.Reader(&c.in)
	c.bw = bufpool.Writer(&c.out)
}

// giveBackWriter returns the writer once the request is sent: the wait
// for the answer, a model's long one included, holds only the reader.
func (c *conn) giveBackWriter() {
	if c.bw != nil {
		bufpool.PutWriter(c.bw)
		c.bw = nil
	}
}

// giveBack returns what c still holds while it idles in the pool (the
// response was read to its end) or once it is discarded.
func (c *conn) giveBack() {
	c.giveBackWriter()
	if c.br != nil {
		bufpool.PutReader(c.br)
		c.br = nil
	}
}

// discard closes c after a failed or unfinished round trip, on the
// goroutine that made it (nothing else reads or writes c's buffers then),
// and gives its buffers back.
func (c *conn) discard() {
	c.nc.Close()
	c.giveBack()
}

// abort closes the connection for a canceled request: a read or write
// blocked on it returns at once.
func (c *conn) abort() {
	c.aborted.Store(true)
	c.nc.Close()
}

// writeAny writes req into bw: by writeRequest, else by Request.Write
// (either calls trace.WroteRequest and closes req.Body).
func writeAny(bw *bufio.Writer, req *http.Request, h hooks) error {
	handled, err := writeRequest(bw, req, h.trace, h.fields, h.listed)
	if handled {
		return err
	}
	if h.listed {
		// Request.Write writes the Header: the listed fields go there (a
		// rare request: an IPv6 backend's, one with trailers).
		req.Header = headerOf(h.fields)
	}
	return req.Write(oneWrite{bw})
}

// roundTrip writes req on c and reads the response headers, for at most
// headerTimeout after the request is written when that is positive.
//
// The context's cancelation closes c (context.AfterFunc), registered
// only where a wait may be long (watch): before a request body that may
// not leave in one write, once the backend has not begun to answer
// within abortCheck, before reading a body the headers did not bring
// whole. A request answered at once, headers and body in one read (a
// proxied request's usually is), costs no registration: five
// allocations and two locked updates of the context's tree spared. A
// cancelation meanwhile is noticed abortCheck + abortGrid late at most.
func (c *conn) roundTrip(ctx context.Context, req *http.Request, h hooks, headerTimeout time.Duration) (*http.Response, error) {
	if err := ctx.Err(); err != nil {
		closeBody(req)
		c.discard()
		return nil, err
	}
	w := watch{ctx: ctx, c: c, stop: unwatched}
	if req.ContentLength < 0 || req.ContentLength > maxUnwatchedWrite {
		w.start()
	}
	err := writeAny(c.bw, req, h)
	var deadline time.Time
	if headerTimeout > 0 {
		deadline = time.Now().Add(headerTimeout)
	}
	waited := false
	if err == nil {
		waited, err = c.send(w.firstWait(deadline))
	}
	if err == nil {
		c.giveBackWriter()
	}
	if err != nil {
		// A backend that refused the body may have answered before it
		// closed; that answer is the request's, as net/http's is.
		if ctx.Err() == nil {
			_ = c.nc.SetReadDeadline(time.Now().Add(earlyResponseWait))
			if resp, rerr := c.readResponse(req, h, nil); rerr == nil {
				c.startBodyDeadline(resp)
				resp.Close = true
				w.start()
				return c.withBody(resp, req, w.stop, true), nil
			}
		}
		w.stop()
		c.discard()
		return nil, c.failure(ctx, err)
	}
	resp, err := c.awaitResponse(req, h, &w, deadline, waited)
	if err != nil {
		w.stop()
		c.discard()
		if headerTimeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
			return nil, ErrHeaderTimeout
		}
		return nil, c.failure(ctx, err)
	}
	streams := resp.StatusCode == http.StatusSwitchingProtocols ||
		resp.Body != http.NoBody && !(resp.Body == nil && resp.ContentLength <= int64(c.br.Buffered()))
	if streams {
		// The body (or the upgraded connection) is read from the
		// connection, under the stream idle deadline (or none) instead
		// of awaitResponse's. One the buffer holds whole reads nothing
		// more: the deadline is left, a timer update spared, until the
		// next round trip sets its own (alive's probe does not heed it).
		c.startBodyDeadline(resp)
		w.start()
	}
	return c.withBody(resp, req, w.stop, streams), nil
}

// startBodyDeadline replaces the wait for the headers' deadline with the
// body's: the stream idle one from now (Options.StreamIdleTimeout), which
// each read moves on (body.Read), or none. An upgraded connection is the
// caller's, with no deadline.
func (c *conn) startBodyDeadline(resp *http.Response) {
	c.readIdle.Forget() // the round trip's waits set deadlines of their own
	var t time.Time
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t, _ = c.readIdle.Next(time.Now()) // zero without the timeout
	}
	_ = c.nc.SetReadDeadline(t)
}

// abortCheck is how long a round trip waits at least for the backend's
// first byte before it registers for its context's cancelation; the
// wait ends on the next point of a grid of abortGrid (package coarse),
// so a wait that ends early leaves its deadline where other requests'
// timers fall due too. The server's watch for a client going away is on
// from the body's end on Linux (downstream's poller; elsewhere it reads
// from WatchAfter, 5 ms, after the body, on the same grid, so from this
// wait's point or one before): a cancelation is noticed abortCheck +
// abortGrid late at most.
const (
	abortCheck = 5 * time.Millisecond
	abortGrid  = coarse.Step
)

// maxUnwatchedWrite is the largest request body written before the
// context's cancelation is registered: a write that fits an idle
// connection's socket buffer does not wait for the backend to read.
const maxUnwatchedWrite = 16 << 10

// watch is a round trip's registration for its context's cancelation,
// made once it is needed (roundTrip); stop unregisters it, and reports
// false once the cancelation closed the connection.
type watch struct {
	ctx  context.Context
	c    *conn
	stop func() bool
}

// unwatched is the stop of a round trip that registered nothing.
func unwatched() bool { return true }

func (w *watch) start() {
	if w.c != nil {
		w.stop = context.AfterFunc(w.ctx, w.c.abortFn)
		w.c = nil
	}
}

// firstWait is the end of a round trip's first wait for the backend's
// answer: abortCheck from now rounded up to abortGrid's next point, or
// the header timeout's deadline when that comes first; for a round trip
// already watched, the deadline.
func (w *watch) firstWait(deadline time.Time) time.Time {
	if w.c == nil {
		return deadline
	}
	soon := coarse.Ceil(time.Now().Add(abortCheck), abortGrid)
	if !deadline.IsZero() && deadline.Before(soon) {
		return deadline
	}
	return soon
}

// awaitResponse waits for the response to begin and reads its headers.
// The first wait, to w.firstWait, was send's (waited: it ran out); the
// rest of the header timeout's is watched: registered for the context's
// cancelation.
//
// Unless the answer is there already: a wait that ran out may have had
// its answer arrive in time, the round trip's goroutine running only
// after the deadline. A sidecar behind on its own queue does that to
// most requests (docs/hop-cost.md "The answer that came in time": four
// in five ran out, nine in ten of those with their answer there): the
// scheduler runs due timers whenever it switches goroutines, but asks
// the poller which sockets are ready only when it runs out of work (or
// every 10 ms), so the deadline's timer wakes the goroutine before the
// answer's readiness does. Such an answer
// is read as it is, as one read within the first wait would have been:
// no registration (five allocations and two locked updates of the
// context's tree) and no buffer handed back and lent again.
func (c *conn) awaitResponse(req *http.Request, h hooks, w *watch, deadline time.Time, waited bool) (*http.Response, error) {
	c.in.n = c.t.o.MaxHeaderBytes // the first byte's read counts too
	defer func() { c.in.n = -1 }()
	for {
		if waited {
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return nil, os.ErrDeadlineExceeded
			}
			answered := c.answered()
			if !answered {
				w.start()
			}
			if err := w.ctx.Err(); err != nil {
				c.abort() // as the cancelation would have, had it been registered
				return nil, err
			}
			_ = c.nc.SetReadDeadline(deadline)
			if !answered {
				if err := c.awaitAnswer(); err != nil {
					return nil, err
				}
			}
		}
		_, err := c.br.Peek(1)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || waited {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // as ReadResponse's
			}
			return nil, err
		}
		waited = true
	}
	return c.readResponse(req, h, &deadline)
}

// awaitAnswer waits, holding no buffer, until the backend's answer
// begins, the connection ends or the read deadline passes (the error).
// It is the long wait of a round trip whose answer did not begin within
// its first wait: a model server still prefilling keeps a request there
// for seconds, and thousands of requests at once; the reader, 4 KiB, is
// lent again once there is something to read (docs/hop-cost.md "The
// wait for an answer, without a buffer").
func (c *conn) awaitAnswer() error {
	if c.raw == nil || c.br.Buffered() > 0 {
		return nil
	}
	bufpool.PutReader(c.br)
	c.br = nil
	err := c.waiter.Wait(c.raw)
	c.br = bufpool.Reader(&c.in)
	return err
}

// readResponse reads the final response's headers, skipping 100 Continue
// and passing other 1xx responses to the hooks. With a deadline, the
// reads of a head the buffer does not hold whole (and of any after a
// 1xx response) are bounded by it; without, by the deadline set.
func (c *conn) readResponse(req *http.Request, h hooks, deadline *time.Time) (*http.Response, error) {
	if c.in.n < 0 { // else counting since awaitResponse's first read
		c.in.n = c.t.o.MaxHeaderBytes
		defer func() { c.in.n = -1 }()
	}
	for n1xx := 0; ; n1xx++ {
		if deadline != nil && (n1xx > 0 || !httphead.Complete(httphead.Unread(c.br))) {
			_ = c.nc.SetReadDeadline(*deadline) // not awaitResponse's few milliseconds
			deadline = nil
		}
		resp, err := c.readHead(req, h.heads)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if n1xx == max1xx {
			return nil, errors.New("upstream: too many 1xx informational responses")
		}
		if code != http.StatusContinue {
			if err := h.got1xx(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return nil, err
			}
		}
	}
}

// readHead reads a response head: by httphead, from what the first read
// buffered, when that holds all of it in a shape httphead takes (its
// Body is then nil, for withBody to frame; parsed into heads when the
// caller lends them), by http.ReadResponse otherwise. Either way the
// response is what http.ReadResponse makes of it.
func (c *conn) readHead(req *http.Request, heads *httphead.Responses) (*http.Response, error) {
	if _, err := c.br.Peek(1); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // as ReadResponse's
		}
		return nil, err
	}
	if heads == nil {
		heads = new(httphead.Responses)
	}
	if resp, n, ok := heads.Response(httphead.Unread(c.br), req); ok {
		_, _ = c.br.Discard(n)
		if resp.ContentLength == 0 {
			resp.Body = http.NoBody
		}
		return resp, nil
	}
	return http.ReadResponse(c.br, req)
}

// failure is the error of an attempt whose connection failed: the
// context's when it was canceled (the read saw only the closed socket).
func (c *conn) failure(ctx context.Context, err error) error {
	if c.aborted.Load() && ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, errHeaderTooLarge) {
		return fmt.Errorf("upstream: response headers over %d bytes", c.t.o.MaxHeaderBytes)
	}
	return err
}

// withBody wires resp's body to c: read to its end, it gives c back to
// the pool (if both sides keep the connection alive); closed before, it
// closes c. An upgraded connection's body is the connection itself.
// streams: the body is read from the connection (startBodyDeadline), not
// from what the buffer holds.
func (c *conn) withBody(resp *http.Response, req *http.Request, stop func() bool, streams bool) *http.Response {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &upgraded{c: c, stop: stop}
		return resp
	}
	b := &body{c: c, rc: resp.Body, stop: stop, keep: !resp.Close && !req.Close, idle: streams && c.readIdle.D > 0}
	if resp.Body == nil { // httphead's: ContentLength bytes on c
		b.fixed.Reset(c.br, resp.ContentLength)
		b.rc = &b.fixed
	}
	if resp.Body == http.NoBody {
		b.end()
	}
	resp.Body = b
	return resp
}

// alive reports whether the backend has not closed an idle connection:
// a read that does not wait finds nothing to read (EAGAIN) rather than
// its end or stray bytes. net/http's Transport learns the same from the
// read every idle connection has pending in its own goroutine.
func (c *conn) alive() bool {
	if c.raw == nil {
		return true
	}
	_, errno, err := c.prober.Probe(c.raw)
	return err == nil && peek.Empty(errno)
}

// answered reports whether the backend's answer has begun: something
// to read waits in the socket (bytes, or its end or an error, which the
// read reports).
func (c *conn) answered() bool {
	if c.raw == nil {
		return false
	}
	_, errno, err := c.prober.Probe(c.raw)
	return err == nil && !peek.Empty(errno)
}

// oneWrite is the buffered writer Request.Write is given: a
// *bufio.Writer, but not of that type, so that Write does not flush the
// headers on their own before a body it does not know to be in memory
// (ReverseProxy wraps every body): headers and a body that fits the
// buffer leave in one write(2), not two.
type oneWrite struct{ *bufio.Writer }

// errHeaderTooLarge: the response headers passed Options.MaxHeaderBytes.
var errHeaderTooLarge = errors.New("upstream: response headers too large")

// limitReader reads r, at most n more bytes while n >= 0.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// body is a response body on a pooled connection.
type body struct {
	c  *conn
	rc io.ReadCloser // ReadResponse's body, or fixed, reading c.br
	// fixed frames a body httphead's head announced.
	fixed httphead.Body
	stop  func() bool // unregisters the context's abort
	// keep: neither side asked to close the connection.
	keep bool
	// idle: each read moves the connection's read deadline on (c.readIdle).
	idle bool
	// done: c was given back or closed; reads return EOF or err.
	done bool
	err  error
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	if b.idle {
		// One read waits once at most (a chunked body's returns what
		// one wait brought), so each wait has the bound ahead of it.
		if t, ok := b.c.readIdle.Next(time.Now()); ok {
			_ = b.c.nc.SetReadDeadline(t)
		}
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.end()
	case err != nil:
		switch {
		case b.c.aborted.Load():
			err = context.Canceled
		case b.idle:
			err = b.c.readIdle.Err(err, idlePkg, "the backend sent no byte of its response")
		}
		b.err = err
		b.done = true
		b.stop()
		b.c.discard()
	}
	return n, err
}

// end gives the connection back after the body's last byte, when it can
// carry another request: kept alive, not canceled meanwhile, and nothing
// after the response.
func (b *body) end() {
	b.done = true
	if b.stop() && b.keep && b.c.br.Buffered() == 0 {
		b.c.t.putIdle(b.c)
		return
	}
	b.c.discard()
}

// Close before the end closes the connection: the rest of the body is
// never read (ReadResponse's own Close would read it all). Its buffers
// are left to the collector: Close may come from another goroutine than
// a Read in progress (to cut a stream short), which may still use them.
func (b *body) Close() error {
	if !b.done {
		b.done = true
		b.stop()
		b.c.nc.Close()
	}
	return nil
}

// upgraded is a 101 response's body: the connection, both ways.
type upgraded struct {
	c    *conn
	stop func() bool
}

func (u *upgraded) Read(p []byte) (int, error)  { return u.c.br.Read(p) }
func (u *upgraded) Write(p []byte) (int, error) { return u.c.nc.Write(p) }
func (u *upgraded) Close() error {
	u.stop()
	return u.c.nc.Close()
}
