package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// idleCount is the number of idle connections to addr.
func (t *Transport) idleCount(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle[addr])
}

func newTransport(o Options) *Transport {
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	}
	return New(o)
}

// connTracker is a test server that counts the connections it accepted.
type connTracker struct {
	*httptest.Server
	accepted atomic.Int32
}

func newServer(t *testing.T, h http.HandlerFunc) *connTracker {
	return newServerWatching(t, h, nil)
}

// newServerWatching is newServer with onNew called with each new connection.
func newServerWatching(t *testing.T, h http.HandlerFunc, onNew func(net.Conn)) *connTracker {
	t.Helper()
	s := &connTracker{Server: httptest.NewUnstartedServer(h)}
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.accepted.Add(1)
			if onNew != nil {
				onNew(c)
			}
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *connTracker) addr() string { return strings.TrimPrefix(s.URL, "http://") }

// do runs one request through tr and returns its body, and whether the
// connection was a reused one.
func do(t *testing.T, tr *Transport, req *http.Request) (resp *http.Response, body string, reused bool) {
	t.Helper()
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	resp.Body.Close()
	return resp, string(b), reused
}

func post(t *testing.T, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestKeepAliveReusesOneConnection(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, "echo:"+string(b))
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	for i, want := range []bool{false, true, true} {
		resp, body, reused := do(t, tr, post(t, s.URL+"/v1/x?q=1", "hi"))
		if resp.StatusCode != 200 || body != "echo:hi" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if reused != want {
			t.Errorf("request %d: reused %v, want %v", i, reused, want)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Errorf("the server accepted %d connections, want 1", n)
	}
}

func TestBodyClosedEarlyClosesTheConnection(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 1<<20))
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(post(t, s.URL, ""))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := tr.idleCount(s.addr()); n != 0 {
		t.Fatalf("a connection with an unread body went back to the pool (%d idle)", n)
	}
	if _, body, reused := do(t, tr, post(t, s.URL, "")); reused || len(body) != 1<<20 {
		t.Errorf("next request: reused %v, %d bytes", reused, len(body))
	}
}

// A connection the backend closed while it was idle is not used: the next
// request dials a new one and succeeds (no "empty response" to retry).
func TestBackendClosedIdleConnectionIsNotUsed(t *testing.T) {
	var mu sync.Mutex
	var conns []net.Conn
	s := newServerWatching(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	do(t, tr, post(t, s.URL, ""))
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	// The FIN reaches the client's socket; wait for the server to have
	// closed (its ConnState) rather than for a time.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := tr.popIdle(s.addr())
		if c == nil {
			t.Fatal("the first connection was not pooled")
		}
		alive := c.alive()
		tr.putIdle(c)
		if !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connection still looks alive after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, body, reused := do(t, tr, post(t, s.URL, ""))
	if resp.StatusCode != 200 || body != "ok" || reused {
		t.Errorf("after the backend closed: %d %q reused=%v", resp.StatusCode, body, reused)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Errorf("the server accepted %d connections, want 2", n)
	}
}

func TestCancelWhileWaitingForHeaders(t *testing.T) {
	gone := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // (the server watches the connection after the body)
		<-r.Context().Done()        // the client's connection closed
		close(gone)
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req := post(t, s.URL, "x").WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RoundTrip did not return after its context was canceled")
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend did not see the connection close")
	}
}

// A cancelation before the round trip registered for it (it does after
// abortCheck without an answer) still ends the wait, and one before the
// round trip began sends nothing.
func TestCancelBeforeTheWaitIsWatched(t *testing.T) {
	var got atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	for _, after := range []time.Duration{0, abortCheck / 5} {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := tr.RoundTripHeaderTimeout(post(t, s.URL, "x").WithContext(ctx), time.Minute)
			errc <- err
		}()
		time.Sleep(after)
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("canceled after %v: %v, want context.Canceled", after, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("canceled after %v: RoundTrip did not return", after)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.RoundTrip(post(t, s.URL, "x").WithContext(ctx)); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled before: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	if n := got.Load(); n > 2 {
		t.Errorf("the backend saw %d requests; the one canceled before it began must not reach it", n)
	}
}

// A stream's events reach the caller as they are sent, and canceling
// mid-stream ends the read with the context's error and closes the
// connection.
func TestStreamsAndCancelMidStream(t *testing.T) {
	next := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := io.WriteString(w, "data: event\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := tr.RoundTrip(post(t, s.URL, "").WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		line, err := br.ReadString('\n')
		if err != nil || line != "data: event\n" {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
	cancel()
	if _, err := io.ReadAll(br); !errors.Is(err, context.Canceled) {
		t.Errorf("reading after cancel: %v, want context.Canceled", err)
	}
	resp.Body.Close()
	if n := tr.idleCount(s.addr()); n != 0 {
		t.Errorf("a canceled stream's connection was pooled")
	}
}

// A final response well after an informational one (a model server's
// 103, then its answer) is waited for as long as the header timeout
// allows, not the few milliseconds of the first wait's steps; and one
// that ends a slow first wait is read whole.
func TestSlowAnswersWithinTheHeaderTimeout(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hints" {
			w.Header().Set("Link", "</a>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		time.Sleep(2 * (abortCheck + abortGrid)) // past the first wait, on any point of its grid
		io.WriteString(w, "final")
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	for _, path := range []string{"/hints", "/slow"} {
		resp, err := tr.RoundTripHeaderTimeout(post(t, s.URL+path, "x"), time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "final" {
			t.Fatalf("%s: %d %q %v", path, resp.StatusCode, body, err)
		}
	}
}

func TestInformationalResponses(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "final")
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	var got []int
	var link string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got, link = append(got, code), h.Get("Link")
		return nil
	}}
	req := post(t, s.URL, "").WithContext(httptrace.WithClientTrace(context.Background(), trace))
	resp, body, _ := do(t, tr, req)
	if resp.StatusCode != 200 || body != "final" || len(got) != 1 || got[0] != 103 || link == "" {
		t.Errorf("final %d %q; 1xx %v (Link %q)", resp.StatusCode, body, got, link)
	}
}

// rawServer answers each request on a connection with reply(request).
func rawServer(t *testing.T, reply func(c net.Conn, br *bufio.Reader, req *http.Request)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					reply(c, br, req)
				}
			})
		}
	})
	return ln.Addr().String()
}

func TestResponseHeadersOverTheLimitFail(t *testing.T) {
	addr := rawServer(t, func(c net.Conn, _ *bufio.Reader, _ *http.Request) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", 8<<10)+"\r\nContent-Length: 0\r\n\r\n")
	})
	tr := newTransport(Options{MaxHeaderBytes: 4 << 10})
	defer tr.CloseIdleConnections()
	_, err := tr.RoundTrip(post(t, "http://"+addr, ""))
	if err == nil || !strings.Contains(err.Error(), "response headers over 4096 bytes") {
		t.Fatalf("error %v, want the header limit's", err)
	}
	// Under the limit, the same transport carries the next response.
	tr2 := newTransport(Options{MaxHeaderBytes: 16 << 10})
	defer tr2.CloseIdleConnections()
	if resp, _, _ := do(t, tr2, post(t, "http://"+addr, "")); resp.StatusCode != 200 || len(resp.Header.Get("X-Big")) != 8<<10 {
		t.Errorf("under the limit: %d", resp.StatusCode)
	}
}

func TestConnectionCloseIsNotPooled(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	for range 2 {
		if _, body, reused := do(t, tr, post(t, s.URL, "")); body != "bye" || reused {
			t.Fatalf("%q reused=%v", body, reused)
		}
	}
	if n := tr.idleCount(s.addr()); n != 0 {
		t.Errorf("%d idle connections after Connection: close", n)
	}
}

func TestIdleTimeoutAndCap(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // so that the requests overlap
		io.WriteString(w, "ok")
	})
	tr := newTransport(Options{MaxIdlePerHost: 2, IdleTimeout: 30 * time.Millisecond})
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { do(t, tr, post(t, s.URL, "")) })
	}
	wg.Wait()
	if n := tr.idleCount(s.addr()); n != 2 {
		t.Errorf("%d idle connections, want the cap of 2", n)
	}
	time.Sleep(60 * time.Millisecond)
	if _, _, reused := do(t, tr, post(t, s.URL, "")); reused {
		t.Error("a connection idle past IdleTimeout was reused")
	}
}

// TestIdleConnectionsAreClosedWithoutTraffic: when no request comes any
// more, the idle connections are closed after IdleTimeout all the same
// (a sidecar after a burst keeps no sockets open).
func TestIdleConnectionsAreClosedWithoutTraffic(t *testing.T) {
	var closed atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed.Add(1)
		}
	}
	s.Start()
	defer s.Close()
	addr := strings.TrimPrefix(s.URL, "http://")
	tr := newTransport(Options{IdleTimeout: 30 * time.Millisecond})
	defer tr.CloseIdleConnections()
	do(t, tr, post(t, s.URL, ""))
	testkit.Eventually(t, 5*time.Second, "the idle connection closed", func() bool {
		return closed.Load() == 1 && tr.idleCount(addr) == 0
	})
	// The sweep ends with the last idle connection, and starts again
	// with the next.
	tr.mu.Lock()
	sweeping := tr.sweeping
	tr.mu.Unlock()
	if sweeping {
		t.Error("a sweep is still due with no connection idle")
	}
	do(t, tr, post(t, s.URL, ""))
	testkit.Eventually(t, 5*time.Second, "the second idle connection closed", func() bool { return closed.Load() == 2 })
}

func TestTrailersAndHead(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Length-Hint", "5")
		if r.Method == "HEAD" {
			w.Header().Set("Content-Length", "5")
			return
		}
		io.WriteString(w, "hello")
		w.(http.Flusher).Flush() // chunked
		w.Header().Set("X-Checksum", "abc")
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	resp, body, _ := do(t, tr, post(t, s.URL, ""))
	if body != "hello" || resp.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("body %q, trailer %v", body, resp.Trailer)
	}
	head, _ := http.NewRequest("HEAD", s.URL, nil)
	resp, body, reused := do(t, tr, head)
	if resp.StatusCode != 200 || body != "" || !reused {
		t.Errorf("HEAD: %d %q reused=%v", resp.StatusCode, body, reused)
	}
	if _, body, reused := do(t, tr, post(t, s.URL, "")); body != "hello" || !reused {
		t.Errorf("after HEAD: %q reused=%v", body, reused)
	}
}

func TestUpgradeGivesTheConnection(t *testing.T) {
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	rwc := upgradeToEcho(t, tr)
	defer rwc.Close()
	io.WriteString(rwc, "ping\n")
	line, err := bufio.NewReader(rwc).ReadString('\n')
	if line != "echo ping\n" {
		t.Errorf("read %q %v", line, err)
	}
}

// upgradeToEcho upgrades a connection through tr to a backend that
// echoes one line after its 101 response, and returns the connection.
func upgradeToEcho(t *testing.T, tr *Transport) io.ReadWriteCloser {
	t.Helper()
	addr := rawServer(t, func(c net.Conn, br *bufio.Reader, req *http.Request) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		line, _ := br.ReadString('\n')
		io.WriteString(c, "echo "+line)
	})
	req, _ := http.NewRequest("GET", "http://"+addr, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatal("an upgraded response's body is not writable")
	}
	return rwc
}

func TestDialErrorsAreDialOpErrors(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	tr := newTransport(Options{})
	_, err := tr.RoundTrip(post(t, "http://"+addr, ""))
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Errorf("error %#v, want a dial *net.OpError", err)
	}
	if _, err := tr.RoundTrip(post(t, "https://"+addr, "")); err == nil || !strings.Contains(err.Error(), `scheme "https"`) {
		t.Errorf("https: %v", err)
	}
}

// A backend that answers before it has read the body, and closes, gives
// the request that answer, as net/http's Transport does.
func TestEarlyAnswerToAnUnwrittenBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			c.Close()
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig")
		c.(*net.TCPConn).CloseWrite()
		// Read the body on, slowly enough that the client's write is
		// still under way, then stop reading and close.
		time.Sleep(100 * time.Millisecond)
		c.Close()
	}()
	tr := newTransport(Options{})
	resp, err := tr.RoundTrip(post(t, "http://"+ln.Addr().String(), strings.Repeat("x", 64<<20)))
	<-done
	if err != nil {
		t.Fatalf("the backend's early answer was lost: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || string(b) != "big" {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
}

// countingConn counts its writes.
type countingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A request's headers and a body that fits the buffer leave in one
// write, even when the body is no reader net/http knows to be in memory
// (ReverseProxy wraps every body in one of its own).
func TestRequestLeavesInOneWrite(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	var writes atomic.Int32
	d := &net.Dialer{}
	tr := newTransport(Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return countingConn{c, &writes}, err
	}})
	defer tr.CloseIdleConnections()
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequest("POST", s.URL, struct{ io.Reader }{strings.NewReader(body)})
	req.ContentLength = int64(len(body))
	if _, got, _ := do(t, tr, req); got != body {
		t.Fatalf("echo %q", got)
	}
	if n := writes.Load(); n != 1 {
		t.Errorf("the request took %d writes, want 1", n)
	}
}

// TestReuseAfterTheWaitsDeadlinePassed: a response read whole leaves
// awaitResponse's short read deadline on the connection (clearing it
// would cost a timer update per request); once it has passed, the idle
// connection must still be found alive and reused, and its next response
// read without a timeout.
func TestReuseAfterTheWaitsDeadlinePassed(t *testing.T) {
	// The latest a round trip's first wait can end: abortCheck from
	// the write, on abortGrid's next point.
	const firstWaitMax = abortCheck + abortGrid

	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			time.Sleep(2 * firstWaitMax)
		}
		io.WriteString(w, "ok")
	})
	tr := newTransport(Options{})
	defer tr.CloseIdleConnections()
	for i, url := range []string{s.URL, s.URL, s.URL + "?slow=1"} {
		resp, body, reused := do(t, tr, post(t, url, ""))
		if resp.StatusCode != 200 || body != "ok" || reused != (i > 0) {
			t.Fatalf("request %d: %d %q reused=%v", i, resp.StatusCode, body, reused)
		}
		time.Sleep(firstWaitMax + 5*time.Millisecond) // past any deadline the round trip set
	}
	if n := s.accepted.Load(); n != 1 {
		t.Errorf("the server accepted %d connections, want 1", n)
	}
}

// TestResponsesAreParsedInPlace: a model server's answer is read by
// httphead and its body framed in the round trip's own body (a change
// that sent it back to http.ReadResponse would pass every other test).
// With heads lent (HeadLender), the response is parsed into them.
func TestResponsesAreParsedInPlace(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Thu, 03 Dec 2026 21:00:00 GMT\r\nContent-Length: 2\r\n\r\n{}"
	req, _ := http.NewRequest(http.MethodPost, "http://b/v1/chat/completions", nil)
	var lent httphead.Responses
	for _, heads := range []*httphead.Responses{nil, &lent} {
		c := &conn{br: bufio.NewReader(strings.NewReader(raw))}
		resp, err := c.readHead(req, heads)
		if err != nil || resp.Body != nil || resp.ContentLength != 2 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("got %+v, %v; want httphead's response (no Body yet, ContentLength 2)", resp, err)
		}
		if heads != nil {
			heads.Forget()
			if resp.StatusCode != 0 {
				t.Fatal("the response was not parsed into the heads lent")
			}
		}
	}
}

// lender is an Observer that lends its heads.
type lender struct {
	Observer
	heads httphead.Responses
}

func (l *lender) ResponseHeads() *httphead.Responses { return &l.heads }

// TestHooksFindTheLentHeads: a round trip parses into the heads its
// context's Observer lends.
func TestHooksFindTheLentHeads(t *testing.T) {
	l := &lender{}
	ctx := context.WithValue(context.Background(), ObserverKey{}, Observer(l))
	if h := hooksOf(ctx); h.heads != &l.heads {
		t.Fatalf("hooks parse into %p, want the lent %p", h.heads, &l.heads)
	}
	if h := hooksOf(context.Background()); h.heads != nil {
		t.Fatal("heads without a lender")
	}
}
