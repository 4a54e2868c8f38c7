package downstream

import (
	"errors"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// TestAcceptedConnectionsRunBeforeTheNextAccept: with connections
// waiting to be accepted, each with its request sent (the burst of
// clients that open one per request while the sidecar is slow), the
// first request is handled before the rest are accepted. An accept loop
// that took the burst whole would start every connection ahead of the
// requests already in.
func TestAcceptedConnectionsRunBeforeTheNextAccept(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one P: the order is the scheduler's queue
	const burst = 16
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for range burst {
		c, _ := dial(t, ln.Addr().String())
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback delivers a write before it returns: every connection is
	// in the listener's queue with its request. The pause is a margin.
	time.Sleep(50 * time.Millisecond)

	acceptedAtFirst := make(chan int, 1)
	s := &Server{}
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		select {
		case acceptedAtFirst <- n:
		default:
		}
	})
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer func() {
		s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	}()
	select {
	case n := <-acceptedAtFirst:
		t.Logf("accepted when the first request was handled: %d of %d", n, burst)
		if n > burst/2 {
			t.Errorf("the first request was handled with %d of the %d waiting connections accepted; want it handled before most are", n, burst)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no request handled")
	}
}
