package downstream

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/bufpool"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// waitNoneLent waits until bufpool lends no buffer (a connection's
// goroutine gives them back after the response has reached the client).
func waitNoneLent(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "no buffer lent", func() error {
		if n := bufpool.Lent(); n != 0 {
			return fmt.Errorf("%d buffers lent, want 0", n)
		}
		return nil
	})
}

// A connection holds a buffer only while it holds, or is about to hold,
// bytes: the reader from a request's first byte to the end of its body,
// the writer from the response's first write to its flush. While the
// handler waits (for a backend's answer) and between requests it holds
// none: a thousand idle keep-alive connections cost no buffers, and a
// thousand requests waiting for their backends few (HAProxy's way).
func TestAConnectionHoldsBuffersOnlyWhileTheyHoldBytes(t *testing.T) {
	// Earlier tests' connections may still be giving their buffers back
	// (their goroutines end after their servers have closed): start from
	// none lent, not from whatever was lent as this test began.
	waitNoneLent(t)
	lent := testkit.LentSince(t)
	inCut := make(chan struct{})
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cut" {
			lent("a body cut short, not yet read", 1)
			inCut <- struct{}{}
			io.ReadAll(r.Body) // fails: the client has gone
			return
		}
		if r.Method == http.MethodGet {
			lent("a request without a body, in the handler", 0)
			io.WriteString(w, "got")
			return
		}
		lent("a body not yet read", 1)
		if b, _ := io.ReadAll(r.Body); string(b) != "abc" {
			t.Errorf("body %q", b)
		}
		lent("the body read to its end", 0)
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event 1")
		lent("a response written, not flushed", 1)
		w.(http.Flusher).Flush()
		lent("flushed", 0)
		io.WriteString(w, "event 2")
	})})
	c, br := dial(t, addr)
	// A new connection that has not sent a byte holds none.
	waitNoneLent(t)
	io.WriteString(c, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	if _, body := readBody(t, br); body != "event 1event 2" {
		t.Fatalf("body %q", body)
	}
	waitNoneLent(t)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := readBody(t, br); body != "got" {
		t.Fatalf("body %q", body)
	}
	waitNoneLent(t)
	// And a connection closed mid-request gives back what it held.
	io.WriteString(c, "POST /cut HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\na")
	<-inCut
	c.Close()
	waitNoneLent(t)
}

// A request that reached the socket after the last one was read, but
// before the connection began to wait for the next, is served: the wait
// (awaitBytes) begins with it already there, its arrival reported while
// nothing waited.
func TestARequestSentBeforeTheWaitIsServed(t *testing.T) {
	first := make(chan struct{})
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			<-first // until the second request is in the socket
		}
		io.WriteString(w, r.URL.Path)
	})})
	c, br := dial(t, addr)
	c.SetDeadline(time.Now().Add(3 * time.Second)) // the server has no idle timeout: a lost request hangs
	for i := range 20 {
		io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(5 * time.Millisecond) // its own segment, read by the server before the next is sent
		second := fmt.Sprintf("/second-%d", i)
		io.WriteString(c, "GET "+second+" HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(5 * time.Millisecond) // in the server's socket, unread
		first <- struct{}{}
		for _, want := range []string{"/first", second} {
			if _, body := readBody(t, br); body != want {
				t.Fatalf("round %d: body %q, want %q", i, body, want)
			}
		}
	}
}

// BenchmarkIdleConnection is the memory (heap and goroutine stacks) an
// idle keep-alive connection keeps after one request, here and on
// net/http's server (which holds its 4 KiB reader and writer while
// idle), side by side:
//
//	go test ./sidecar/downstream/ -run '^$' -bench IdleConnection -benchtime 2000x
func BenchmarkIdleConnection(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	b.Run("downstream", func(b *testing.B) {
		s := &Server{Handler: h}
		benchIdle(b, s.Serve, func() { s.Close() })
	})
	b.Run("net-http", func(b *testing.B) {
		s := &http.Server{Handler: h}
		benchIdle(b, s.Serve, func() { s.Close() })
	})
}

func benchIdle(b *testing.B, serve func(net.Listener) error, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan struct{})
	go func() { serve(ln); close(served) }()
	defer func() { stop(); <-served }()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc + m.StackInuse
	}
	buf := make([]byte, 4096)
	before := heap()
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, err := c.Read(buf); err != nil { // the whole small response, in one segment
			b.Fatal(err)
		}
	}
	b.StopTimer()
	time.Sleep(50 * time.Millisecond) // the last connections' goroutines reach their wait
	after := heap()
	// The client's side of each connection is in this process too: count
	// it as part of the cost, the same for both servers.
	b.ReportMetric(float64(after-before)/float64(b.N), "B/idle-conn")
}
