//go:build linux

package downstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// polledWatches is how many requests' connections the process's poller
// watches now.
func polledWatches() int {
	p := clientPoller()
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watched)
}

// goroutinesIn counts the goroutines with fn on their stacks.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			n++
		}
	}
	return n
}

// On the poller a request in flight past WatchAfter holds no goroutine
// for its watch, request after request on one connection (each
// registration is taken out as its request ends: left in, the next
// request's would be refused and its watch would read on a goroutine),
// and the client going away still cancels it.
func TestAPolledWatchHoldsNoGoroutine(t *testing.T) {
	if clientPoller() == nil {
		t.Fatal("no epoll poller on Linux")
	}
	entered, release := make(chan struct{}), make(chan struct{})
	canceled := make(chan error, 1)
	addr := start(t, &Server{WatchAfter: time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
			io.WriteString(w, "done")
		case <-r.Context().Done():
			canceled <- r.Context().Err()
		}
	})})
	c, br := dial(t, addr)
	const requests = 3
	for i := range requests {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
		testkit.Eventually(t, 5*time.Second, "the request's watch on the poller", func() bool { return polledWatches() == 1 })
		if n := goroutinesIn("downstream.(*watch).run"); n != 0 {
			t.Fatalf("request %d: %d goroutines in the watch's run, want none", i+1, n)
		}
		if i == requests-1 {
			break
		}
		release <- struct{}{}
		if _, body := readBody(t, br); body != "done" {
			t.Fatalf("request %d: body %q", i+1, body)
		}
	}
	c.Close()
	select {
	case err := <-canceled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the request's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client closed its connection and the request was not canceled")
	}
	testkit.Eventually(t, 5*time.Second, "the poller holding no watch", func() bool { return polledWatches() == 0 })
}
