// Package bufpool lends the buffered readers and writers of the proxy's
// connections, client side and backend side, so that a connection holds
// them only while a request passes through it.
//
// Why: a keep-alive connection spends most of its life idle, and a
// reader and a writer of 4 KiB each held through that idleness cost
// 8 KiB per connection, twice over once the garbage collector's headroom
// is counted. After a burst (the router paused, a backlog arriving at
// once) a sidecar is left with thousands of idle connections on both
// sides; HAProxy, which holds buffers only while data is in flight,
// keeps the same connections in a few megabytes. Lent instead, the
// buffers in use follow the requests in progress.
package bufpool

import (
	"bufio"
	"io"
	"sync"
	"sync/atomic"
)

// Size is the buffers' size: bufio's default, which holds a proxied
// request's or response's head whole.
const Size = 4096

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, Size) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, Size) }}
	lent    atomic.Int64
)

// Lent is how many readers and writers are out: those of the requests in
// progress, plus any a closed connection dropped without giving back (it
// does no harm: the collector takes them, the pool makes new ones). The
// tests use it to see that idle connections hold none.
func Lent() int64 { return lent.Load() }

// Reader lends a reader of r.
func Reader(r io.Reader) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	lent.Add(1)
	return br
}

// PutReader takes br back. The caller must not use it again; anything it
// still buffered is lost.
func PutReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
	lent.Add(-1)
}

// Writer lends a writer to w.
func Writer(w io.Writer) *bufio.Writer {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(w)
	lent.Add(1)
	return bw
}

// PutWriter takes bw back. The caller must not use it again; anything it
// still buffered is lost.
func PutWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writers.Put(bw)
	lent.Add(-1)
}
