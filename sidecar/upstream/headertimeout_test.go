package upstream

import (
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// No response headers within the bound: the attempt fails with
// ErrHeaderTimeout, a timeout, and its connection is not kept.
func TestHeaderTimeoutFailsAnAttemptWithoutHeaders(t *testing.T) {
	release := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
	})
	defer close(release)
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", s.URL, nil)
	start := time.Now()
	resp, err := tr.RoundTripHeaderTimeout(req, 100*time.Millisecond)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a backend that never answers: got a response")
	}
	if !errors.Is(err, ErrHeaderTimeout) {
		t.Fatalf("err = %v, want ErrHeaderTimeout", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("err = %v: not a timeout", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("failed after %v, before the bound", waited)
	}
	if n := tr.idleCount(s.addr()); n != 0 {
		t.Errorf("%d idle connections after a timed-out attempt, want 0", n)
	}
}

// The bound is on the headers only: a body that streams longer than it
// arrives whole, and the connection goes back to the pool without the
// deadline, so the next request on it may wait longer than the bound.
func TestHeaderTimeoutLeavesTheBodyAndTheNextRequestUnbounded(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-headers" {
			time.Sleep(300 * time.Millisecond)
			io.WriteString(w, "late")
			return
		}
		fl := w.(http.Flusher)
		for range 3 {
			io.WriteString(w, "chunk ")
			fl.Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", s.URL+"/stream", nil)
	resp, err := tr.RoundTripHeaderTimeout(req, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("headers at once: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "chunk chunk chunk " {
		t.Fatalf("a body streaming for 300ms under a 50ms header bound: %q, %v", b, err)
	}
	req, _ = http.NewRequest("GET", s.URL+"/slow-headers", nil)
	_, body, reused := do(t, tr, req)
	if !reused || body != "late" {
		t.Errorf("the next request on the connection: body %q, reused %v; want \"late\" on the reused connection", body, reused)
	}
}
