//go:build linux

package downstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// registrations returns the numbers of the connections the process's
// poller watches now.
func registrations() []uint64 {
	p := clientPoller()
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.watched))
}

// goroutinesIn counts the goroutines with fn on their stacks.
func goroutinesIn(fn string) int {
	n := 0
	for _, g := range testkit.GoroutineStacks() {
		if bytes.Contains(g, []byte(fn)) {
			n++
		}
	}
	return n
}

// On the poller a request in flight past WatchAfter holds no goroutine
// for its watch, request after request on one connection, which is
// registered once, on its first request, and stays so; the client going
// away still cancels the request, and takes the registration out.
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
	var first uint64
	for i := range requests {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
		time.Sleep(20 * time.Millisecond) // past WatchAfter, where the reading way would start
		ids := registrations()
		if len(ids) != 1 || (i > 0 && ids[0] != first) {
			t.Fatalf("request %d: registrations %v, want the connection's one (%d)", i+1, ids, first)
		}
		first = ids[0]
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
	testkit.Eventually(t, 5*time.Second, "the poller holding no registration", func() bool { return len(registrations()) == 0 })
}

// On the poller a client's hanging up is noticed when it happens, not
// WatchAfter later: with WatchAfter an hour, the request is canceled as
// the client closes (the reading way would look in an hour). And the
// poller waits for its events on Go's own poller, as a socket's read
// does, not in a blocking epoll_wait, which would keep the goroutine's P
// until the runtime's monitor took it back (up to 10 ms; with one P,
// nothing else runs meanwhile): once the hang-up has been delivered, its
// goroutine is back to waiting for IO, not in a system call.
func TestAHangUpIsNoticedAtOnceOnThePoller(t *testing.T) {
	if clientPoller() == nil {
		t.Fatal("no epoll poller on Linux")
	}
	entered := make(chan struct{})
	canceled := make(chan error, 1)
	addr := start(t, &Server{WatchAfter: time.Hour, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the watch starts with the body's end, either way
		close(entered)
		select {
		case <-r.Context().Done():
			canceled <- r.Context().Err()
		case <-time.After(5 * time.Second):
			canceled <- nil
		}
	})})
	c, _ := dial(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	<-entered
	c.Close()
	if err := <-canceled; !errors.Is(err, context.Canceled) {
		t.Fatalf("the request's context ended with %v, want context.Canceled", err)
	}
	testkit.Eventually(t, 5*time.Second, "the poller's goroutine waiting for IO", func() error {
		if state := testkit.GoroutineState("downstream.(*poller).loop"); state != "IO wait" {
			return fmt.Errorf("its state is %q", state)
		}
		return nil
	})
}
