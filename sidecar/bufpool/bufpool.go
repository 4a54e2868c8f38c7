// Package bufpool lends the buffered readers and writers of the proxy's
// connections, client side and backend side, so that a connection holds
// one only while it holds bytes, or is about to: a request's reader until
// its body has ended, a response's writer until it is flushed.
//
// Why: a keep-alive connection spends most of its life idle, and a
// proxied request most of its life waiting for the model server. Held
// through both, a reader and a writer of 4 KiB on each side cost 16 KiB
// per request in flight and 8 KiB per idle connection, twice over once
// the garbage collector's headroom is counted. Under a backlog (the
// sidecar stopped for half a second, thousands of requests arriving at
// once) that was most of a sidecar's memory; HAProxy, which holds
// buffers only while data is in them, served the same backlog in a
// tenth of it (docs/hop-cost.md "Falling behind, and coming back").
// Lent instead, the buffers out follow the bytes in transit.
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
