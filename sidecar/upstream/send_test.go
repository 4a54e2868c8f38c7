package upstream

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// emptyReadConn is a TCP connection, its RawConn included (so a round
// trip writes its request under RawConn.Read), that counts the reads
// made while the socket held nothing to read: each would have been a
// system call that found nothing (EAGAIN) before its wait.
type emptyReadConn struct {
	*net.TCPConn
	reads, empty *atomic.Int32
}

func (c emptyReadConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	if raw, err := c.TCPConn.SyscallConn(); err == nil {
		var errno error
		_ = raw.Control(func(fd uintptr) {
			var b [1]byte
			_, _, errno = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		})
		if errno == syscall.EAGAIN {
			c.empty.Add(1)
		}
	}
	return c.TCPConn.Read(p)
}

// TestTheAnswerIsAwaitedWithoutAnEmptyRead: the wait for a backend's
// answer begins as the request leaves (send), so the answer's first read
// finds it there; a read before it, which found nothing nearly every
// time, was a system call per request.
func TestTheAnswerIsAwaitedWithoutAnEmptyRead(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	var reads, empty atomic.Int32
	d := &net.Dialer{}
	tr := newTransport(Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return emptyReadConn{c.(*net.TCPConn), &reads, &empty}, nil
	}})
	defer tr.CloseIdleConnections()
	const n = 50
	for i := range n {
		if _, got, reused := do(t, tr, post(t, s.URL, "hello")); got != "hello" || reused != (i > 0) {
			t.Fatalf("request %d: %q, reused=%v", i, got, reused)
		}
	}
	// A wait that outlived abortCheck (a stalled machine) reads before
	// its next wait, as before; a few may.
	if e, r := empty.Load(), reads.Load(); r < n || e > n/10 {
		t.Errorf("%d of %d reads found nothing to read in %d round trips, want at least %d reads and at most %d empty", e, r, n, n, n/10)
	}
}

// The first wait for an answer ends abortCheck after the write at the
// earliest, on the next point of abortGrid (the grid the server's watch
// uses by default), or at the header timeout's deadline when that comes
// first; a round trip already watched waits to the deadline.
func TestFirstWaitIsOnTheGrid(t *testing.T) {
	for range 100 {
		now := time.Now()
		w := watch{c: &conn{}}
		got := w.firstWait(time.Time{})
		if got.Before(now.Add(abortCheck)) || !got.Before(time.Now().Add(abortCheck+abortGrid)) {
			t.Fatalf("first wait ends %v after now, want in [%v, %v)", got.Sub(now), abortCheck, abortCheck+abortGrid)
		}
		if got.UnixNano()%int64(abortGrid) != 0 {
			t.Fatalf("first wait ends at %v, not a multiple of %v", got, abortGrid)
		}
	}
	deadline := time.Now().Add(time.Millisecond)
	if got := (&watch{c: &conn{}}).firstWait(deadline); !got.Equal(deadline) {
		t.Errorf("an earlier header deadline: first wait ends %v, want the deadline %v", got, deadline)
	}
	later := time.Now().Add(time.Minute)
	if got := (&watch{}).firstWait(later); !got.Equal(later) {
		t.Errorf("a watched round trip: first wait ends %v, want the deadline %v", got, later)
	}
}
