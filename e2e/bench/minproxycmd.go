package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// minproxyMain serves the least a sticky HTTP/1.1 proxy can do in Go
// until stopped: one goroutine per client connection reads each request
// head into a buffer, finds X-Session-ID and Content-Length in its bytes,
// pins the session to a backend (a map under a mutex; a new session to
// the next backend in turn), and forwards the head and body as they came
// on a pooled keep-alive connection; the response goes back the same way
// (a Content-Length, chunked or close-delimited body, each chunk flushed).
// No header map, no context or timer per request, no timeout, log,
// metric or retry (but a request a reused backend connection lost before
// any answer byte, sent once more on a new one). Section 1 measures it
// beside the TCP relay as the floor of a Go *HTTP* sticky proxy: what
// Go's runtime and the least HTTP work cost per request, so that
// tether's distance from it is what its own features and layers cost
// (docs/hop-cost.md, "The floor of a Go HTTP proxy").
//
// With -work log (or nolog) it also does the work tether does for each
// request besides proxying it (tetherWork), so that what is left between
// it and tether is the shape of tether's data path.
func minproxyMain(ctx context.Context, args []string) error {
	return runMinproxy(ctx, args, os.Stderr)
}

// runMinproxy is minproxyMain with its access log (-work log) written to
// logTo.
func runMinproxy(ctx context.Context, args []string, logTo io.Writer) error {
	var work string
	flags := func(fs *flag.FlagSet) { workFlag(fs, &work, "also do tether's per-request work") }
	return serveConns(ctx, "minproxy", args, flags, func(backends []string) (connHandler, func()) {
		p := &minProxy{table: map[string]int{}}
		for _, b := range backends {
			p.pools = append(p.pools, &upPool{addr: b})
		}
		stop := p.closeIdle
		if work != "" {
			p.work = newTetherWork(backends, work == "log", logTo)
			stop = func() { p.closeIdle(); p.work.close() }
		}
		return func(ctx context.Context, c net.Conn, _ int) { p.serve(ctx, c) }, stop
	})
}

// workFlag adds -work (log or nolog: tether's per-request work with or
// without its access log) to fs, its value into *work.
func workFlag(fs *flag.FlagSet, work *string, usage string) {
	fs.Func("work", usage+": log (with its access log) or nolog", func(v string) error {
		if v != "log" && v != "nolog" {
			return fmt.Errorf("want log or nolog, got %q", v)
		}
		*work = v
		return nil
	})
}

type minProxy struct {
	mu    sync.Mutex
	table map[string]int // session → backend
	next  int            // the backend of the next new session
	pools []*upPool
	work  *tetherWork // nil: none
}

// upPool holds one backend's idle keep-alive connections.
type upPool struct {
	addr string
	mu   sync.Mutex
	idle []*upConn
}

type upConn struct {
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool
}

// msgHead is what the proxy reads of a message head: its bytes, as they
// came, and the fields that frame the body or route the request.
type msgHead struct {
	raw     []byte // the whole head, blank line included
	session []byte // X-Session-ID's value (requests)
	length  int64  // Content-Length, -1 when none
	chunked bool   // Transfer-Encoding: chunked
	close   bool   // Connection: close
}

var (
	errMinHead = errors.New("minproxy: malformed head")
	badGateway = []byte("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
)

// readHead reads one head from br into h.raw (reused), line by line.
func readHead(br *bufio.Reader, h *msgHead) error {
	h.raw, h.session, h.length, h.chunked, h.close = h.raw[:0], nil, -1, false, false
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return errMinHead
			}
			return err // io.EOF between requests: the client is done
		}
		start := len(h.raw)
		h.raw = append(h.raw, line...)
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if first {
				return errMinHead
			}
			break
		}
		if first {
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return errMinHead
		}
		value = bytes.TrimSpace(value)
		switch {
		case fieldIs(name, "x-session-id"):
			// A slice of h.raw: a later line's append may move h.raw,
			// but the bytes this points at stay as they are until the
			// next head is read, after this request's lookup.
			off := start + len(line) - len(value)
			h.session = h.raw[off : off+len(value)]
		case fieldIs(name, "content-length"):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return errMinHead
			}
			h.length = n
		case fieldIs(name, "transfer-encoding"):
			h.chunked = bytes.EqualFold(value, []byte("chunked"))
		case fieldIs(name, "connection"):
			h.close = bytes.EqualFold(value, []byte("close"))
		}
	}
	return nil
}

func fieldIs(name []byte, lower string) bool {
	return len(name) == len(lower) && bytes.EqualFold(name, []byte(lower))
}

// serve proxies c's requests until it closes or ctx ends.
func (p *minProxy) serve(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	br := bufio.NewReaderSize(c, 8192)
	bw := bufio.NewWriterSize(c, 8192)
	var req, resp msgHead
	scratch := make([]byte, 8192)
	for {
		if err := readHead(br, &req); err != nil {
			return
		}
		if req.chunked {
			bw.Write(badGateway) // request bodies of unknown length: not this proxy's
			bw.Flush()
			return
		}
		var w *requestWork
		if p.work != nil {
			w = p.work.begin(ctx, req.session)
		}
		ok, keep := p.roundTrip(br, bw, &req, &resp, scratch, w)
		if w != nil {
			p.endWork(w, &req, &resp, ok)
		}
		if !ok {
			bw.Write(badGateway)
		}
		if bw.Flush() != nil || !ok || !keep || req.close {
			return
		}
	}
}

// endWork ends w's work for req, answered by resp when ok.
func (p *minProxy) endWork(w *requestWork, req, resp *msgHead, ok bool) {
	var method, path string
	if p.work.logs() {
		method, path = requestLine(req.raw)
	}
	status := 502
	if ok {
		status = statusOf(resp.raw)
	}
	p.work.end(w, method, path, status)
}

// backend is the session's backend, pinning a new session to the next
// in turn.
func (p *minProxy) backend(session []byte) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.table[string(session)]; ok { // no allocation for the lookup
		return i
	}
	i := p.next
	p.next = (p.next + 1) % len(p.pools)
	if len(session) > 0 {
		p.table[string(session)] = i
	}
	return i
}

// roundTrip sends req (its body still in br) to the session's backend
// (w's, when the proxy does tether's work) and copies the answer to bw,
// through w's usage scan. ok is false when no answer began (the caller
// answers 502); keep, whether the client connection can go on.
func (p *minProxy) roundTrip(br *bufio.Reader, bw *bufio.Writer, req, resp *msgHead, scratch []byte, w *requestWork) (ok, keep bool) {
	var pool *upPool
	var scan func([]byte)
	if w != nil {
		pool, scan = p.pools[w.backend], w.scan
	} else {
		pool = p.pools[p.backend(req.session)]
	}
	for attempt := 0; ; attempt++ {
		up, err := pool.get()
		if err != nil {
			return false, false
		}
		buffered, err := up.send(req, br, scratch)
		if err == nil {
			err = readHead(up.br, resp)
		}
		if err != nil {
			up.nc.Close()
			if up.reused && attempt == 0 && buffered {
				continue // a backend's idle close: once more on a new connection
			}
			return false, false
		}
		if buffered && req.length > 0 {
			br.Discard(int(req.length)) // answered: the body is consumed
		}
		bw.Write(resp.raw)
		if err := copyBody(bw, up.br, resp, scratch, scan); err != nil {
			up.nc.Close()
			return true, false // the answer began: the client sees it cut short
		}
		if resp.close || resp.length < 0 && !resp.chunked && hasBody(resp) {
			up.nc.Close()
		} else {
			pool.put(up)
		}
		return true, true
	}
}

// send writes the request head and its body (req.length bytes of br).
// buffered reports that the body was wholly in br's buffer and is still
// there (the request can be sent again); a longer one is copied through
// scratch and consumed.
func (up *upConn) send(req *msgHead, br *bufio.Reader, scratch []byte) (buffered bool, err error) {
	up.bw.Write(req.raw)
	buffered = true
	if n := req.length; n > 0 {
		if n <= int64(br.Size()) {
			body, err := br.Peek(int(n))
			if err != nil {
				return false, err
			}
			up.bw.Write(body)
		} else {
			buffered = false
			if err := copyN(up.bw, br, n, scratch, nil); err != nil {
				return false, err
			}
		}
	}
	return buffered, up.bw.Flush()
}

// hasBody: a response to a request other than HEAD has a body unless its
// status is 1xx, 204 or 304 (the bench sends no HEAD).
func hasBody(resp *msgHead) bool {
	if len(resp.raw) < 12 {
		return true
	}
	code := string(resp.raw[9:12])
	return code[0] != '1' && code != "204" && code != "304"
}

// copyBody copies a response body framed as resp says, flushing each
// chunk of a chunked one (server-sent events pass as they come), and
// gives scan (if not nil) what it copies of a framed one.
func copyBody(bw *bufio.Writer, br *bufio.Reader, resp *msgHead, scratch []byte, scan func([]byte)) error {
	switch {
	case resp.chunked:
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return err
			}
			bw.Write(line)
			size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
			n, err := strconv.ParseInt(string(size), 16, 64)
			if err != nil || n < 0 {
				return errMinHead
			}
			if n == 0 { // the last chunk: trailers up to a blank line
				for {
					t, err := br.ReadSlice('\n')
					if err != nil {
						return err
					}
					bw.Write(t)
					if len(bytes.TrimRight(t, "\r\n")) == 0 {
						return nil
					}
				}
			}
			if err := copyN(bw, br, n+2, scratch, scan); err != nil { // data and its CRLF
				return err
			}
			if err := bw.Flush(); err != nil {
				return err
			}
		}
	case resp.length >= 0:
		return copyN(bw, br, resp.length, scratch, scan)
	case !hasBody(resp):
		return nil
	default: // to the connection's end
		_, err := io.CopyBuffer(bw, br, scratch)
		return err
	}
}

// copyN copies exactly n bytes of br to bw through scratch, giving scan
// (if not nil) each piece: io.CopyN without the io.LimitReader it
// allocates on every call (a body, a chunk), which the floor of a Go
// proxy should not pay.
func copyN(bw *bufio.Writer, br *bufio.Reader, n int64, scratch []byte, scan func([]byte)) error {
	for n > 0 {
		m, err := io.ReadFull(br, scratch[:min(n, int64(len(scratch)))])
		if err != nil {
			return err
		}
		if scan != nil {
			scan(scratch[:m])
		}
		bw.Write(scratch[:m])
		n -= int64(m)
	}
	return nil
}

func (p *upPool) get() (*upConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		up := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		up.reused = true
		return up, nil
	}
	p.mu.Unlock()
	nc, err := net.DialTimeout("tcp", p.addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &upConn{nc: nc, br: bufio.NewReaderSize(nc, 8192), bw: bufio.NewWriterSize(nc, 8192)}, nil
}

func (p *upPool) put(up *upConn) {
	p.mu.Lock()
	p.idle = append(p.idle, up)
	p.mu.Unlock()
}

func (p *minProxy) closeIdle() {
	for _, pool := range p.pools {
		pool.mu.Lock()
		for _, up := range pool.idle {
			up.nc.Close()
		}
		pool.idle = nil
		pool.mu.Unlock()
	}
}
