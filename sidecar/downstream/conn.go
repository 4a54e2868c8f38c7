package downstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/tetherproxy/tether/sidecar/bufpool"
	"github.com/tetherproxy/tether/sidecar/coarse"
	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/peek"
)

// A connection's states, for Shutdown: it closes new and idle ones, and
// one in a request is left to finish it.
const (
	stateNew    int32 = iota // accepted, no request yet
	stateIdle                // between requests
	stateActive              // reading or serving a request
	stateClosed              // closed by Shutdown
)

// conn is one client connection, served on its own goroutine: a request
// is read, handled and answered before the next is read.
type conn struct {
	s        *Server
	nc       net.Conn
	remote   string
	accepted time.Time
	state    atomic.Int32
	in       inReader
	// br and bw are lent (bufpool) while they hold or may soon hold
	// bytes: br from the next request's first byte to the end of its
	// body, bw from the response's first write to its flush; nil
	// otherwise (while the handler waits for a backend, and between
	// requests).
	br *bufio.Reader // over in
	bw *bufio.Writer // over out
	// out writes to nc, each wait bounded by Server.WriteIdleTimeout.
	out outWriter
	// raw waits for the next request without buffers (awaitBytes); nil
	// when nc has no descriptor (the buffered read waits instead).
	raw    syscall.RawConn
	waiter peek.Waiter       // awaitBytes's
	w      response          // the request in progress; reused
	body   requestBody       // its body; reused
	fixed  httphead.Body     // the bytes of a body httphead framed; reused
	heads  httphead.Requests // the requests httphead parses; reused
	// backendHeads are lent to the handler for its backend's response
	// (response.ResponseHeads); reused.
	backendHeads httphead.Responses
	watch        watch
	// deadlineLeft: a read deadline of the head's (awaitRequest's idle or
	// first-byte one, readRequest's header one) may still be set. It is
	// cleared only before a read that would heed it (a body not yet
	// buffered, the watch's): most requests make none, and are spared a
	// timer update (setReadDeadline).
	deadlineLeft atomic.Bool
	// lastMethod is the previous request's method: after a POST, stray
	// line breaks before the next request are skipped (RFC 9112 section
	// 2.2, for clients that end a body with one; net/http does the same).
	lastMethod string
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), accepted: time.Now()}
	c.in.nc = nc
	c.in.left = -1
	c.out.nc, c.out.idle.D = nc, s.WriteIdleTimeout
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
			c.waiter.Init()
			if !s.readWatch {
				c.watch.poll = clientPoller()
			}
		}
	}
	c.watch.c = c
	c.watch.cond.L = &c.watch.mu
	c.w.header = make(http.Header)
	c.heads.Listed = s.ListRequests
	return c
}

// closeIfIdle closes c when it waits for a request (or, accepted more
// than newConnGrace ago, has not sent its first) and says so.
func (c *conn) closeIfIdle() bool {
	if c.state.CompareAndSwap(stateIdle, stateClosed) ||
		(time.Since(c.accepted) > newConnGrace && c.state.CompareAndSwap(stateNew, stateClosed)) {
		c.nc.Close()
		return true
	}
	return false
}

func (c *conn) serve() {
	defer c.end()
	for {
		if !c.awaitRequest() {
			return
		}
		req, err := c.readRequest()
		if err != nil {
			c.refuse(err)
			return
		}
		if !c.serveRequest(req) || c.s.closing.Load() {
			return
		}
	}
}

func (c *conn) end() {
	c.watch.stop()
	c.nc.Close()
	c.giveBack() // the handler has returned: nothing reads or writes them any more
	c.s.remove(c)
}

// awaitRequest waits for the first byte of the next request: the idle
// timeout bounds the wait between requests, the header timeout the wait
// for a new connection's first.
func (c *conn) awaitRequest() bool {
	from := c.state.Load()
	var deadline time.Time
	if from == stateNew {
		if d := c.s.ReadHeaderTimeout; d > 0 {
			deadline = c.accepted.Add(d)
		}
	} else {
		from = stateIdle
		c.state.Store(stateIdle)
		if c.s.closing.Load() {
			return false
		}
		if d := c.s.IdleTimeout; d > 0 {
			deadline = time.Now().Add(d)
		}
	}
	// Always set: a watch aborted by a deadline in the past left one.
	_ = c.nc.SetReadDeadline(deadline)
	if !c.in.hasExtra && (c.br == nil || c.br.Buffered() == 0) {
		c.giveBackReader()
		if !c.awaitBytes() {
			return false
		}
	}
	c.lendReader()
	// The header limit counts from here: the Peek may buffer much of them.
	c.in.limit(c.s.headerLimit())
	if _, err := c.br.Peek(1); err != nil {
		return false
	}
	return c.state.CompareAndSwap(from, stateActive)
}

// lendReader gives c a reader, if it has given its own back.
func (c *conn) lendReader() {
	if c.br == nil {
		c.br = bufpool.Reader(&c.in)
	}
}

// writer is c's writer, lent if c has given its own back.
func (c *conn) writer() *bufio.Writer {
	if c.bw == nil {
		c.bw = bufpool.Writer(&c.out)
	}
	return c.bw
}

// giveBackReader returns c's reader when it holds nothing: the request's
// body has ended, and no byte of a pipelined next request came with it.
func (c *conn) giveBackReader() {
	if c.br != nil && c.br.Buffered() == 0 {
		bufpool.PutReader(c.br)
		c.br = nil
	}
}

// giveBackWriter returns c's writer when it has flushed all it held.
func (c *conn) giveBackWriter() {
	if c.bw != nil && c.bw.Buffered() == 0 {
		bufpool.PutWriter(c.bw)
		c.bw = nil
	}
}

// giveBack returns both buffers of a connection that has ended, whatever
// they hold.
func (c *conn) giveBack() {
	if c.br != nil {
		bufpool.PutReader(c.br)
		c.br = nil
	}
	if c.bw != nil {
		bufpool.PutWriter(c.bw)
		c.bw = nil
	}
}

// awaitBytes waits until the client sends its next request's first
// bytes, closes, or the read deadline passes, holding no buffer: the
// wait is the poller's, under RawConn.Read. It reports false when the
// deadline passed or the connection was closed (by Shutdown).
//
// A read through the buffer would wait as well, but holding the buffer
// it reads into. A bare wait on RawConn.Read would not do either: Go
// forgets the socket's readiness before it calls its function, so a
// request that arrived before would wait for the socket's next event
// (the client's acknowledgement of the last answer, when it comes).
// peek.Waiter looks first, which costs what the read it replaces cost
// when nothing has arrived: one system call.
func (c *conn) awaitBytes() bool {
	if c.raw == nil {
		return true
	}
	return c.waiter.Wait(c.raw) == nil
}

// outWriter is the writer under a connection's buffered writer.
type outWriter struct {
	nc   net.Conn
	idle coarse.IdleDeadline // the write deadline (Server.WriteIdleTimeout)
}

func (o *outWriter) Write(p []byte) (int, error) {
	n, err := o.idle.Write(o.nc, p)
	return n, o.idle.Err(err, "downstream", "the client took no byte of the response")
}

// errTooLarge is a request line and header block over the server's limit.
var errTooLarge = errors.New("request header fields too large")

// statusError is a request refused with its status.
type statusError struct {
	code int
	text string
}

func (e statusError) Error() string { return e.text }

func (c *conn) readRequest() (*http.Request, error) {
	// The header timeout bounds the reads of the head: one that the
	// buffer already holds whole (most: it came in one segment, which
	// awaitRequest's Peek took) is read without any, which spares a
	// clock read and a timer's update per request.
	if d := c.s.ReadHeaderTimeout; d > 0 && !httphead.Complete(httphead.Unread(c.br)) {
		_ = c.nc.SetReadDeadline(time.Now().Add(d))
	}
	if c.lastMethod == http.MethodPost {
		peek, _ := c.br.Peek(4)
		n := 0
		for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
			n++
		}
		_, _ = c.br.Discard(n)
	}
	req, parsed, err := c.readHead()
	hit := c.in.unlimit()
	if err != nil {
		if hit {
			return nil, errTooLarge
		}
		return nil, err
	}
	c.lastMethod = req.Method
	if req.ProtoMajor != 1 {
		return nil, statusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	if req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect {
		return nil, statusError{http.StatusBadRequest, "missing required Host header"}
	}
	if req.Host != "" && !httpguts.ValidHostHeader(req.Host) {
		return nil, statusError{http.StatusBadRequest, "malformed Host header"}
	}
	if !parsed { // httphead took only valid names and values
		for k, vv := range req.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				return nil, statusError{http.StatusBadRequest, "invalid header name"}
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					return nil, statusError{http.StatusBadRequest, "invalid header value"}
				}
			}
		}
	}
	c.deadlineLeft.Store(true)
	return req, nil
}

// setReadDeadline sets the connection's read deadline for what is read
// next, in place of any the head's reads left.
func (c *conn) setReadDeadline(t time.Time) error {
	c.deadlineLeft.Store(false)
	return c.nc.SetReadDeadline(t)
}

// clearLeftDeadline clears a read deadline the head's reads left before
// a read that would heed it.
func (c *conn) clearLeftDeadline() {
	if c.deadlineLeft.Swap(false) {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
}

// readHead reads the next request's head: by httphead, from the buffer,
// when the buffer holds all of it in a shape httphead takes (it reports
// parsed then), by http.ReadRequest otherwise. Either way the request is
// what http.ReadRequest makes of it.
func (c *conn) readHead() (req *http.Request, parsed bool, err error) {
	if buf := httphead.Unread(c.br); len(buf) > 0 {
		if req, n, ok := c.heads.Request(buf); ok {
			_, _ = c.br.Discard(n)
			req.Body = http.NoBody
			if req.ContentLength > 0 {
				c.fixed.Reset(c.br, req.ContentLength)
				req.Body = &c.fixed
			}
			return req, true, nil
		}
	}
	req, err = http.ReadRequest(c.br)
	return req, false, err
}

// refuse answers a request that could not be read, as net/http does
// (status lines and bodies included), unless the client went away or
// timed out (then there is no one to answer); the connection closes.
func (c *conn) refuse(err error) {
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	const headers = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	var se statusError
	switch {
	case errors.Is(err, errTooLarge):
		const text = "431 Request Header Fields Too Large"
		io.WriteString(c.nc, "HTTP/1.1 "+text+headers+text)
		// The client may still be sending: closing now could reset the
		// connection before it reads the answer.
		if tc, ok := c.nc.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			_ = c.nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, _ = io.Copy(io.Discard, c.nc)
		}
	case strings.Contains(err.Error(), "unsupported transfer encoding"):
		// The encoding is not echoed (net/http: cross-site scripting).
		io.WriteString(c.nc, "HTTP/1.1 501 Not Implemented"+headers+"Unsupported transfer encoding")
	case errors.As(err, &se):
		text := fmt.Sprintf("%d %s: %s", se.code, http.StatusText(se.code), se.text)
		io.WriteString(c.nc, "HTTP/1.1 "+text+headers+text)
	default:
		const text = "400 Bad Request"
		io.WriteString(c.nc, "HTTP/1.1 "+text+headers+text)
	}
}

// maxDiscard is how much of a request body the handler left unread is
// read and dropped to keep the connection (net/http's figure); a longer
// rest closes it.
const maxDiscard = 256 << 10

// drainTimeout bounds the wait for that rest; the connection's next read
// deadline replaces it.
const drainTimeout = 2 * time.Second

// serveRequest hands req to the handler and finishes its response. It
// reports whether the connection can carry another request.
func (c *conn) serveRequest(req *http.Request) bool {
	ctx, cancel := context.WithCancel(c.s.baseContext())
	defer cancel()
	*req = *req.WithContext(ctx) // in place: req is this request's own (WithContext's copy stays on the stack)
	req.RemoteAddr = c.remote
	w := &c.w
	w.reset(c, req)
	expect := c.requestField(req, "Expect")
	continueAsked := httpguts.HeaderValuesContainsToken([]string{expect}, "100-continue")
	c.watch.begin(cancel)
	c.body.reset(c, req.Body, continueAsked && req.ProtoAtLeast(1, 1))
	if expect != "" && !continueAsked {
		w.closeAfter = true
		w.WriteHeader(http.StatusExpectationFailed)
		w.finish()
		return false
	}
	if c.body.eof {
		req.Body = http.NoBody
		c.giveBackReader()
		c.watch.arm()
	} else {
		req.Body = &c.body
	}
	handled := c.handle(w, req)
	c.watch.disarm()
	if !handled {
		return false // the handler aborted: the response is cut where it stood
	}
	w.finish()
	reusable := w.reusable()
	c.forget()
	return reusable
}

// requestField is the first value of req's field name (canonical), from
// its list when it was read Listed.
func (c *conn) requestField(req *http.Request, name string) string {
	if fields, ok := c.heads.Fields(req); ok {
		return httphead.FieldValue(fields, name)
	}
	return req.Header.Get(name)
}

// forget drops the finished request, so that a connection waiting for
// its next one keeps none of the last one's objects alive (the request,
// its headers and context, what the handler hung on them).
func (c *conn) forget() {
	c.w.req = nil
	clear(c.w.header)
	c.body = requestBody{c: c, eof: true}
	c.fixed.Reset(nil, 0)
	c.heads.Forget()
	c.backendHeads.Forget()
}

// handle runs the handler. A panic ends the request unfinished, so the
// client sees a cut response; http.ErrAbortHandler is the quiet way a
// handler asks for that (ReverseProxy does when a backend fails
// mid-body), anything else is logged with its stack.
func (c *conn) handle(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				stack := make([]byte, 64<<10)
				stack = stack[:runtime.Stack(stack, false)]
				c.s.log().Error("panic serving a request", "remote", c.remote, "panic", fmt.Sprint(v), "stack", string(stack))
			}
			ok = false
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	return true
}

// inReader is what the connection's bufio.Reader reads: the socket,
// after a byte the watch read, and bounded while headers are read (as
// upstream's limitReader bounds a response's).
type inReader struct {
	nc       net.Conn
	left     int64 // bytes the header block may still read; < 0: no bound
	extra    [1]byte
	hasExtra bool
}

func (r *inReader) limit(n int64) { r.left = n }

// unlimit ends the bound and reports whether it was reached (net/http's
// hitReadLimit: a read that fails there answers 431).
func (r *inReader) unlimit() bool {
	hit := r.left == 0
	r.left = -1
	return hit
}

func (r *inReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.left == 0 {
		return 0, io.EOF
	}
	if r.left > 0 && int64(len(p)) > r.left {
		p = p[:r.left]
	}
	var n int
	var err error
	if r.hasExtra {
		p[0], r.hasExtra, n = r.extra[0], false, 1
	} else {
		n, err = r.nc.Read(p)
	}
	if r.left > 0 {
		r.left -= int64(n)
	}
	return n, err
}

// requestBody is a request's body as the handler reads it: it sends the
// 100 Continue a client asked for on the first read, and once the body
// has ended it starts the watch for the client going away.
type requestBody struct {
	c            *conn
	src          io.ReadCloser
	eof          bool
	sendContinue bool
	err          error
}

// reset makes b the body of the next request: src from ReadRequest
// (nil or http.NoBody when the request has none).
func (b *requestBody) reset(c *conn, src io.ReadCloser, sendContinue bool) {
	eof := src == nil || src == http.NoBody
	*b = requestBody{c: c, src: src, eof: eof, sendContinue: sendContinue && !eof}
}

func (b *requestBody) Read(p []byte) (int, error) {
	switch {
	case b.eof:
		return 0, io.EOF
	case b.err != nil:
		return 0, b.err
	}
	if b.c.deadlineLeft.Load() && !b.Buffered() {
		b.c.clearLeftDeadline()
	}
	if b.sendContinue {
		b.sendContinue = false
		b.c.w.writeContinue()
	}
	n, err := b.src.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
		b.c.giveBackReader() // the body's reader, ended, reads it no more
		if !b.c.w.done {
			b.c.watch.arm()
		}
	case err != nil:
		b.err = err
	}
	return n, err
}

// Buffered reports whether the rest of the body is already read from
// the connection (a handler that bounds each read with a deadline needs
// none for it): an ended body, or one httphead framed whose bytes the
// connection's reader holds.
func (b *requestBody) Buffered() bool {
	if b.eof {
		return true
	}
	f, ok := b.src.(*httphead.Body)
	return ok && !b.sendContinue && f.Buffered()
}

// Close leaves the connection open: what is left of the body is read or
// the connection closed when the response ends.
func (b *requestBody) Close() error { return nil }

// drain reads and drops up to maxDiscard bytes of what the handler left
// unread and reports whether the body ended within them.
func (b *requestBody) drain() bool {
	if b.eof {
		return true
	}
	if b.err != nil || b.sendContinue {
		// A client waiting for 100 Continue has not sent its body.
		return false
	}
	_ = b.c.setReadDeadline(time.Now().Add(drainTimeout))
	_, err := io.CopyN(io.Discard, b, maxDiscard+1)
	return err == io.EOF && b.eof
}
