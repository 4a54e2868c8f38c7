package upstream

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/coarse"
)

// A stream that stops after its first event: the next read fails with
// the stream idle error, a timeout, no sooner than the bound, and the
// backend sees its connection close (vLLM aborts the request then). The
// stream comes on a connection whose stream before ended well: the
// deadline that one left is not taken for the new one's.
func TestStreamIdleTimeoutEndsAStreamThatStops(t *testing.T) {
	const idle = 200 * time.Millisecond
	closed := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Path == "/whole" {
			return
		}
		<-r.Context().Done() // the server's read sees the connection close
		close(closed)
	})
	tr := newTransport(Options{StreamIdleTimeout: idle})
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", s.URL+"/whole", nil)
	do(t, tr, req)
	req, _ = http.NewRequest("POST", s.URL+"/stops", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); line != "data: 1\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	br.ReadString('\n')
	start := time.Now()
	read := make(chan error, 1)
	go func() {
		_, err := br.ReadString('\n')
		read <- err
	}()
	select {
	case err = <-read:
	case <-time.After(10 * time.Second):
		resp.Body.Close() // ends the read
		<-read
		t.Fatal("the read still waits 10 s after the backend went quiet")
	}
	waited := time.Since(start)
	if !IsStreamIdle(err) {
		t.Fatalf("read after the backend went quiet: %v, want the stream idle error", err)
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("%v: not a timeout", err)
	}
	if want := "upstream: the backend sent no byte of its response for 200ms"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if IsStreamIdle(coarse.IdleError{Pkg: "downstream", What: "the client took no byte of the response", D: time.Second}) {
		t.Error("the client's side's idle error reads as the backend's")
	}
	if waited < idle {
		t.Errorf("failed after %v, before the bound", waited)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's connection is still open")
	}
	if n := tr.idleCount(s.addr()); n != 0 {
		t.Errorf("%d idle connections after a stream that timed out, want 0", n)
	}
}

// A stream whose events come more often than the bound lasts as long as
// it goes on, well past the first deadline set (3/2 of the bound), and
// the connection it leaves waits for the next request's headers longer
// than the bound: the body's deadline does not outlive the body.
func TestStreamIdleTimeoutSparesAStreamThatGoesOn(t *testing.T) {
	const idle = 250 * time.Millisecond
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow-headers" {
			time.Sleep(2 * idle)
			io.WriteString(w, "late")
			return
		}
		for i := range 8 {
			io.WriteString(w, strings.Repeat("x", i+1))
			w.(http.Flusher).Flush()
			time.Sleep(idle / 2)
		}
	})
	tr := newTransport(Options{StreamIdleTimeout: idle})
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", s.URL+"/stream", nil)
	start := time.Now()
	_, body, _ := do(t, tr, req)
	if took := time.Since(start); len(body) != 36 || took < 3*idle/2 {
		t.Fatalf("a stream of 8 events %v apart: %d bytes in %v, want 36 bytes in over %v", idle/2, len(body), took, 3*idle/2)
	}
	req, _ = http.NewRequest("GET", s.URL+"/slow-headers", nil)
	_, body, reused := do(t, tr, req)
	if !reused || body != "late" {
		t.Errorf("the next request on the connection: body %q, reused %v; want \"late\" on the reused connection", body, reused)
	}
}

// A backend that takes no byte of a request body: the write fails with
// the stream idle error instead of waiting as long as the client does.
func TestStreamIdleTimeoutEndsAWriteTheBackendDoesNotTake(t *testing.T) {
	const idle = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn // accepted, never read
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, c := range held {
			c.Close()
		}
	})
	tr := newTransport(Options{StreamIdleTimeout: idle})
	defer tr.CloseIdleConnections()
	body := bytes.Repeat([]byte("a"), 64<<20) // far over the sockets' buffers
	req, _ := http.NewRequest("POST", "http://"+ln.Addr().String(), bytes.NewReader(body))
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a backend that reads nothing: got a response")
	}
	if !IsStreamIdle(err) || err.Error() != "upstream: the backend took no byte of the request for 200ms" {
		t.Fatalf("err = %v, want the stream idle error of a write", err)
	}
}

// An upgraded connection is the caller's, with no deadline: it may be
// quiet for longer than the bound.
func TestStreamIdleTimeoutLeavesAnUpgradedConnection(t *testing.T) {
	const idle = 100 * time.Millisecond
	tr := newTransport(Options{StreamIdleTimeout: idle})
	defer tr.CloseIdleConnections()
	rwc := upgradeToEcho(t, tr)
	defer rwc.Close()
	time.Sleep(3 * idle)
	io.WriteString(rwc, "ping\n")
	if line, err := bufio.NewReader(rwc).ReadString('\n'); line != "echo ping\n" {
		t.Errorf("after %v quiet: read %q, %v", 3*idle, line, err)
	}
}
