package downstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/coarse"
	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// goleakMain checks that no test leaves a goroutine behind, but net/http's
// own (the conformance tests' reference server lingers up to half a
// second on a connection it refused, closeWriteAndWait, past its Close)
// and the process's poller, which lives as long as the process.
func goleakMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(testkit.LongLived(), goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))...)
}

// start serves s on a loopback port and returns its address; wrap, if
// given, wraps the listener.
func start(t *testing.T, s *Server, wrap ...func(net.Listener) net.Listener) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	var serving net.Listener = ln
	for _, w := range wrap {
		serving = w(serving)
	}
	go func() { served <- s.Serve(serving) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func readBody(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// watchWays runs a test of the watch both ways: on the process's poller
// (Linux) and reading on a goroutine of its own (elsewhere, or a
// connection without a descriptor).
func watchWays(t *testing.T, test func(t *testing.T, s *Server)) {
	t.Run("poller", func(t *testing.T) {
		if clientPoller() == nil {
			t.Skip("no poller on this system: the watch reads (the other subtest)")
		}
		test(t, &Server{WatchAfter: time.Millisecond})
	})
	t.Run("read", func(t *testing.T) { test(t, &Server{WatchAfter: time.Millisecond, readWatch: true}) })
}

// A client that goes away while its request waits (for a model's first
// token) cancels the request's context: the proxy stops the backend's work.
func TestClientGoingAwayCancelsTheRequest(t *testing.T) {
	watchWays(t, func(t *testing.T, s *Server) {
		canceled := make(chan error, 1)
		s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			select {
			case <-r.Context().Done():
				canceled <- r.Context().Err()
			case <-time.After(5 * time.Second):
				canceled <- nil
			}
		})
		addr := start(t, s)
		for _, req := range []string{
			"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n",
			"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		} {
			c, _ := dial(t, addr)
			io.WriteString(c, req)
			time.Sleep(20 * time.Millisecond) // past WatchAfter: the watch is on
			c.Close()
			if err := <-canceled; !errors.Is(err, context.Canceled) {
				t.Fatalf("%q: the request's context ended with %v, want context.Canceled", req, err)
			}
		}
	})
}

// A request that ends before WatchAfter never starts the watch, and one
// that outlives it has its connection watched while it runs: a pipelined
// request's bytes, seen (or, reading, its first byte taken) by the watch,
// must reach the next request.
func TestPipelinedRequestAfterAWatchedOne(t *testing.T) {
	watchWays(t, func(t *testing.T, s *Server) {
		s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				time.Sleep(50 * time.Millisecond)
			}
			io.WriteString(w, r.URL.Path)
		})
		addr := start(t, s)
		c, br := dial(t, addr)
		io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
		for _, want := range []string{"/slow", "/next"} {
			if _, body := readBody(t, br); body != want {
				t.Fatalf("body %q, want %q", body, want)
			}
		}
		// And the connection still serves after the watch ended.
		io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := readBody(t, br); body != "/slow" {
			t.Fatalf("third request: body %q", body)
		}
	})
}

// A client that sends its next request while one runs and then shuts
// its side (a pipelining client done sending) has the running request
// finish, its next byte being queued behind it, and the next one, which
// finds the client's end at once, canceled: what net/http's background
// read does, either way (the poller's event comes while the first runs).
func TestAHalfClosingPipelinerKeepsItsRunningRequest(t *testing.T) {
	watchWays(t, func(t *testing.T, s *Server) {
		entered, release := make(chan struct{}), make(chan struct{})
		ended := make(chan error, 2)
		s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/first" {
				close(entered)
				<-release
			} else {
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			}
			ended <- r.Context().Err()
			io.WriteString(w, r.URL.Path)
		})
		addr := start(t, s)
		c, br := dial(t, addr)
		io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
		time.Sleep(20 * time.Millisecond) // past WatchAfter: the watch is on
		io.WriteString(c, "GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
		c.(*net.TCPConn).CloseWrite()
		time.Sleep(20 * time.Millisecond) // the client's end seen while /first runs
		close(release)
		if _, body := readBody(t, br); body != "/first" {
			t.Fatalf("first response: %q", body)
		}
		if err := <-ended; err != nil {
			t.Fatalf("/first ended with %v, want it left running", err)
		}
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Fatalf("/last ended with %v, want context.Canceled", err)
		}
	})
}

// ReverseProxy cuts a response it cannot finish (the backend failed
// mid-body) by panicking with http.ErrAbortHandler: the client must see
// the response end without its last chunk, not a clean end.
func TestAbortedHandlerCutsTheResponse(t *testing.T) {
	var panics atomic.Int32
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if http.NewResponseController(w).Flush() == nil { // a ResponseWriter that flushes
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
		}
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panics.Add(1)
		panic("a bug")
	})})
	for _, path := range []string{"/abort", "/bug"} {
		c, br := dial(t, addr)
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if !errors.Is(err, io.ErrUnexpectedEOF) || string(body) != "data: first\n\n" {
			t.Fatalf("%s: read %q, %v; want the first event, then io.ErrUnexpectedEOF", path, body, err)
		}
	}
}

// Shutdown closes idle connections at once, lets a request in progress
// finish with "Connection: close", and returns when it has.
func TestShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "done")
	})}
	addr := start(t, s)
	idle, idleBR := dial(t, addr)
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	readBody(t, idleBR)
	busy, busyBR := dial(t, addr)
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if _, err := idleBR.ReadByte(); err == nil {
		t.Fatal("the idle connection was not closed")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("a new connection was accepted after Shutdown")
	}
	close(release)
	resp, body := readBody(t, busyBR)
	if body != "done" || !resp.Close {
		t.Fatalf("in-progress request: %q, close %v; want done and Connection: close", body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// Shutdown gives up when its context ends; Close then ends what is left.
// The request's handler returns only once its context is canceled: a
// polled watch gets no event for a socket closed under it, so Close
// cancels it.
func TestShutdownGivesUpWithItsContext(t *testing.T) {
	watchWays(t, func(t *testing.T, s *Server) {
		entered, returned := make(chan struct{}), make(chan struct{})
		s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(returned)
			close(entered)
			<-r.Context().Done()
		})
		addr := start(t, s)
		c, _ := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		<-entered
		time.Sleep(20 * time.Millisecond) // past WatchAfter: the watch is on
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want context.DeadlineExceeded", err)
		}
		s.Close() // closes the connection: the watch cancels the request
		select {
		case <-returned:
		case <-time.After(5 * time.Second):
			t.Fatal("Close left the request running")
		}
	})
}

// The idle timeout closes a keep-alive connection with no next request,
// and the header timeout one whose request does not arrive in full.
func TestIdleAndHeaderTimeouts(t *testing.T) {
	addr := start(t, &Server{IdleTimeout: 50 * time.Millisecond, ReadHeaderTimeout: 50 * time.Millisecond,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	readBody(t, br)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want io.EOF", err)
	}
	c, br = dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost:")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("half a request: %v, want io.EOF", err)
	}
}

// The head's timeouts bound the head only: the deadline they leave (it
// is cleared lazily, deadlineLeft) must not cut a body that arrives
// later than they, read by a handler that sets no deadline of its own,
// nor end the watch of a request that runs longer than they (a client
// gone after them still cancels it), on a new connection (the header
// timeout's deadline) and a reused one (the idle timeout's).
func TestTheHeadsTimeoutsEndWithTheHead(t *testing.T) {
	const timeout = 50 * time.Millisecond
	got := make(chan string, 1)
	addr := start(t, &Server{IdleTimeout: timeout, ReadHeaderTimeout: timeout, WatchAfter: time.Millisecond,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				got <- "body: " + err.Error()
				return
			}
			if r.URL.Path == "/wait" {
				select {
				case <-r.Context().Done():
					got <- "canceled"
				case <-time.After(5 * time.Second):
					got <- "not canceled"
				}
				return
			}
			got <- string(b)
			io.WriteString(w, "ok")
		})})
	c, br := dial(t, addr)
	for i := range 2 { // the first on a new connection, the second reused
		io.WriteString(c, "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
		time.Sleep(3 * timeout)
		io.WriteString(c, "cd")
		if b := <-got; b != "abcd" {
			t.Fatalf("request %d: the handler read %q, want the whole body", i, b)
		}
		readBody(t, br)
	}
	io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(3 * timeout) // the watch reads, past the idle deadline
	c.Close()
	if r := <-got; r != "canceled" {
		t.Fatalf("a client gone after the idle timeout: %s", r)
	}
}

// A client asking for 100 Continue gets it once the handler reads the
// body, and only then sends the body.
func TestExpectContinue(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})})
	c, br := dial(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("got %v, %v; want 100 Continue", resp, err)
	}
	io.WriteString(c, "hello")
	if _, body := readBody(t, br); body != "hello" {
		t.Fatalf("body %q", body)
	}
}

// The request's context carries http.ServerContextKey: ReverseProxy
// panics to cut a response only under a server, and stays silent
// otherwise.
func TestRequestContextNamesAServer(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Value(http.ServerContextKey).(*http.Server); !ok {
			w.WriteHeader(http.StatusInternalServerError)
		}
		if r.RemoteAddr == "" {
			w.WriteHeader(http.StatusTeapot)
		}
	})})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := readBody(t, br); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// A streamed response reaches the client event by event.
func TestFlushSendsEachEvent(t *testing.T) {
	next := make(chan struct{})
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			io.WriteString(w, strings.Repeat("e", i+1)+"\n")
			w.(http.Flusher).Flush()
			<-next
		}
	})})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := lines.ReadString('\n')
		if err != nil || line != strings.Repeat("e", i+1)+"\n" {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		next <- struct{}{}
	}
}

// TestBodyNotYetHereIsNotBuffered: a body still on its way says so (the
// proxy bounds its reads with a deadline then).
func TestBodyNotYetHereIsNotBuffered(t *testing.T) {
	const head = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n{\"a\":"
	c := &conn{br: bufio.NewReader(strings.NewReader(head))}
	c.br.Peek(1)
	req, parsed, err := c.readHead()
	if err != nil || !parsed {
		t.Fatalf("parsed %v, %v", parsed, err)
	}
	c.body.reset(c, req.Body, false)
	if c.body.Buffered() {
		t.Fatal("5 of 10 bytes buffered, and the body says it is all here")
	}
}

// TestProxiedRequestsAreParsedInPlace: a router's request, and the next
// on the same connection, are read by httphead from the buffer, their
// bodies framed by the connection's reused reader (a change that sent
// them all back to http.ReadRequest would pass every other test).
func TestProxiedRequestsAreParsedInPlace(t *testing.T) {
	const one = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nX-Session-ID: s-1\r\nContent-Length: 2\r\n\r\n{}"
	c := &conn{br: bufio.NewReader(strings.NewReader(one + one))}
	for i := range 2 {
		if _, err := c.br.Peek(1); err != nil {
			t.Fatal(err)
		}
		req, parsed, err := c.readHead()
		if err != nil || !parsed {
			t.Fatalf("request %d: parsed %v, %v", i, parsed, err)
		}
		c.body.reset(c, req.Body, false)
		if !c.body.Buffered() {
			t.Fatalf("request %d: a body the buffer holds is not Buffered", i)
		}
		if b, _ := io.ReadAll(req.Body); string(b) != "{}" || req.Body != &c.fixed || req.Header.Get("X-Session-Id") != "s-1" {
			t.Fatalf("request %d: body %q (%T), header %v", i, b, req.Body, req.Header)
		}
		c.forget()
		if req.Method != "" || len(req.Header) != 0 {
			t.Fatalf("request %d: not the connection's own (httphead.Requests), or not forgotten: %+v", i, req)
		}
	}
}

// TestResponseHeadsAreTheConnections: a handler is lent the connection's
// storage for its backend's response head, the same for every request on
// the connection, forgotten between them.
func TestResponseHeadsAreTheConnections(t *testing.T) {
	const backend = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n"
	var (
		lent     *httphead.Responses
		lastResp *http.Response
	)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, ok := w.(interface{ ResponseHeads() *httphead.Responses })
		if !ok {
			t.Error("the response lends no heads")
			return
		}
		heads := l.ResponseHeads()
		if lent != nil && heads != lent {
			t.Error("another request on the connection was lent other heads")
		}
		if lastResp != nil && lastResp.StatusCode != 0 {
			t.Error("the last request's response head was not forgotten")
		}
		resp, _, ok := heads.Response([]byte(backend), r)
		if !ok || resp.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("parsed %v: %+v", ok, resp)
		}
		lent, lastResp = heads, resp
	})}
	addr := start(t, s)
	c, br := dial(t, addr)
	for range 3 {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		if resp, _ := readBody(t, br); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// A watch starts WatchAfter after it is armed, on the next point of a
// grid of ten times WatchAfter (50 ms by default, the grid of upstream's
// first wait): two requests that end within one step of it share the
// point their timers fall due at.
func TestWatchDelayIsOnTheGrid(t *testing.T) {
	for _, s := range []*Server{{}, {WatchAfter: time.Millisecond}} {
		after := s.watchAfter()
		step := 10 * after
		for range 100 {
			now := time.Now()
			d := s.watchDelay(now)
			if d < after || d >= after+step {
				t.Fatalf("WatchAfter %v: delay %v, want in [%v, %v)", after, d, after, after+step)
			}
			if due := now.Add(d); due.UnixNano()%int64(step) != 0 {
				t.Fatalf("WatchAfter %v: due at %v, not a multiple of %v", after, due, step)
			}
		}
	}
	if d := (&Server{}).watchAfter(); d != 5*time.Millisecond || 10*d != coarse.Step {
		t.Errorf("the default WatchAfter is %v on a grid of %v, want 5ms on coarse.Step (%v, upstream's too)", d, 10*d, coarse.Step)
	}
}
