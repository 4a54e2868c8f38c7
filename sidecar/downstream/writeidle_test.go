package downstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/coarse"
)

// smallBuffers is a listener whose connections send from a small socket
// buffer, so that a response waits for its client's reads soon.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

func withSmallBuffers(ln net.Listener) net.Listener { return smallBuffers{ln} }

// A client that sends its request and stops reading: the handler's
// write fails with the write idle error, a timeout, and the connection
// is closed (the client, reading again, finds its end).
func TestWriteIdleTimeoutEndsAResponseTheClientDoesNotTake(t *testing.T) {
	const idle = 200 * time.Millisecond
	failed := make(chan error, 1)
	s := &Server{WriteIdleTimeout: idle, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range 4096 { // 256 MiB: far over any socket buffer
			if _, err := w.Write(chunk); err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	})}
	addr := start(t, s, withSmallBuffers)
	c, _ := dial(t, addr)
	io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	var err error
	select {
	case err = <-failed:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still writes 10 s after its client stopped reading")
	}
	if !errors.As(err, new(coarse.IdleError)) || err.Error() != "downstream: the client took no byte of the response for 200ms" {
		t.Fatalf("the handler's write: %v, want the write idle error", err)
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("%v: not a timeout", err)
	}
	// The connection is closed: reading what was sent ends (EOF, or a
	// reset), well before the client's own deadline (dial's, 10 s).
	if _, err := io.Copy(io.Discard, c); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("reading the rest: %v, want the connection's end", err)
		}
	}
}

// A stream whose events come more often than the bound goes on well
// past the first deadline set (3/2 of the bound): each write moves it.
func TestWriteIdleTimeoutSparesAStreamThatGoesOn(t *testing.T) {
	const idle = 250 * time.Millisecond
	failed := make(chan error, 1)
	s := &Server{WriteIdleTimeout: idle, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 8 {
			if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
				failed <- err
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				failed <- err
				return
			}
			time.Sleep(idle / 2)
		}
		failed <- nil
	})}
	addr := start(t, s)
	c, br := dial(t, addr)
	io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	begun := time.Now()
	_, body := readBody(t, br)
	if took := time.Since(begun); took < 3*idle/2 || strings.Count(body, "data: ") != 8 {
		t.Fatalf("a stream of 8 events %v apart: %q in %v, want 8 events in over %v", idle/2, body, took, 3*idle/2)
	}
	if err := <-failed; err != nil {
		t.Fatalf("the handler's write: %v", err)
	}
}
