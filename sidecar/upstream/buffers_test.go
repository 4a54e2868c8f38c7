package upstream

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/bufpool"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// A connection holds its writer until the request is sent and its reader
// until the response has been read: a pooled one holds neither, nor
// does one discarded after a failure, before the response's headers or
// in its body.
func TestBuffersAreLentForARoundTripOnly(t *testing.T) {
	lent := testkit.LentSince(t)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cut": // headers, part of the body, and the connection dropped
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/gone": // no answer at all
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "ok")
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	for range 3 {
		if _, body, _ := do(t, tr, post(t, s.URL, "x")); body != "ok" {
			t.Fatalf("body %q", body)
		}
		lent("a pooled connection", 0)
	}

	resp, err := tr.RoundTrip(post(t, s.URL+"/cut", "x"))
	if err != nil {
		t.Fatal(err)
	}
	lent("while the body is read (the reader; the writer went back once the request was sent)", 1)
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Fatalf("a body cut at %q read to its end", b)
	}
	resp.Body.Close()
	lent("after a body cut short", 0)

	if _, err := tr.RoundTrip(post(t, s.URL+"/gone", "x")); err == nil {
		t.Fatal("a backend that closed without an answer: no error")
	}
	lent("after a round trip without an answer", 0)
}

// A round trip whose answer has not begun within its first wait holds no
// buffer while it waits on: a model server still prefilling keeps
// requests there for seconds, thousands at once. The reader is lent
// again when the answer arrives.
func TestAWaitForTheAnswerHoldsNoBuffer(t *testing.T) {
	base := bufpool.Lent()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer let() // before the server's cleanup, which waits for its handler
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "ok")
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	answer := make(chan string, 1)
	go func() {
		resp, err := tr.RoundTrip(post(t, s.URL, "x"))
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- string(b)
	}()
	<-arrived
	testkit.Eventually(t, 5*time.Second, "no buffer lent while the answer is awaited", func() bool { return bufpool.Lent() == base })
	let()
	if got := <-answer; got != "ok" {
		t.Fatalf("answer %q", got)
	}
	if n := bufpool.Lent() - base; n != 0 {
		t.Errorf("%d buffers lent after the round trip", n)
	}
}
