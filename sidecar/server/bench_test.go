package server_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/testkit"
	"github.com/tetherproxy/tether/sidecar/threads"
)

// BenchmarkProxiedRequest compares one small request straight to a backend
// with the same request through the sidecar (header session key, memory
// store, sticky hit), over real loopback HTTP with keep-alive, side by side.
//
//	go test -run '^$' -bench ProxiedRequest -benchmem ./sidecar/server/
func BenchmarkProxiedRequest(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer backend.Close()
	sc := startSidecar(b, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""))
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	run := func(b *testing.B, url string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if status, _ := post(b, client, url, body); status != 200 {
					b.Fatalf("status %d", status)
				}
			}
		})
	}
	b.Run("direct", func(b *testing.B) { run(b, backend.URL+"/v1/chat/completions") })
	b.Run("via-sidecar", func(b *testing.B) { run(b, sc.url("default/m", "/v1/chat/completions")) })
}

// BenchmarkProxiedStream is BenchmarkProxiedRequest for a streamed
// completion: a backend flushing each of N server-sent events, straight
// and through the sidecar, which flushes each event on as it comes. An
// operation is one whole stream, so what the sidecar spends per event is
// the slope between the two lengths: (via-sidecar − direct at 50 events
// − the same at 5) / 45, in time and in allocations (none per event is
// the aim: a stream's events should cost the proxy its reads and writes).
//
//	go test -run '^$' -bench ProxiedStream -benchmem ./sidecar/server/
func BenchmarkProxiedStream(b *testing.B) {
	event := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n, _ := strconv.Atoi(r.URL.Query().Get("events"))
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range n {
			w.Write(event)
			f.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer backend.Close()
	sc := startSidecar(b, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""))
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	for _, events := range []int{5, 50} {
		for _, via := range []struct{ name, url string }{
			{"direct", backend.URL + "/v1/chat/completions"},
			{"via-sidecar", sc.url("default/m", "/v1/chat/completions")},
		} {
			url := via.url + "?events=" + strconv.Itoa(events)
			b.Run(fmt.Sprintf("events=%d/%s", events, via.name), func(b *testing.B) {
				b.ReportAllocs()
				want := int64(events*len(event) + len("data: [DONE]\n\n"))
				for b.Loop() {
					if status, n := post(b, client, url, body); status != 200 || n != want {
						b.Fatalf("status %d, %d bytes, want 200 and %d", status, n, want)
					}
				}
			})
		}
	}
}

// BenchmarkWatchedRequest is what a request that outlives the watch's
// start (5–55 ms, downstream.Server.WatchAfter) costs, as a model
// server's requests all do: requests through the sidecar to a backend
// that answers each 60 ms after it came, 128 at a time on keep-alive
// connections, with the process's CPU per request (the benchmark's
// client and backend are in it too: for comparing builds).
//
//	go test -run '^$' -bench WatchedRequest ./sidecar/server/
func BenchmarkWatchedRequest(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(60 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer backend.Close()
	warn := new(slog.LevelVar)
	warn.Set(slog.LevelWarn)
	sc := startSidecar(b, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""),
		func(d *server.Deps) { d.LogLevel = warn })
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	url := sc.url("default/m", "/v1/chat/completions")
	b.SetParallelism(64)
	cpu0 := threads.ProcessCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if status, _ := post(b, client, url, body); status != 200 {
				b.Fatalf("status %d", status)
			}
		}
	})
	b.ReportMetric(float64((threads.ProcessCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/req")
}

// BenchmarkRequestInFlight is the memory a request holds while its
// backend has not answered yet, as a model server's long answers do. An
// operation is a batch of inFlight requests on as many new connections,
// each a new session (a first binding, the deepest path), all read by a
// backend that holds them; with every one of them held, the goroutine
// stacks and live heap they hold are reported per request, and the
// process's CPU per request (with the benchmark's client and backend:
// for comparing builds). The stacks are the connection's goroutine (and,
// from 5–55 ms into the request, where the process has no poller, the
// one watching for the client going away); the heap includes the session's
// binding and the client's and the backend's side of each connection (a
// net.Conn each, no goroutine). A connection's goroutine starts small and
// grows by copying as its first request goes deeper (docs/hop-cost.md
// "What the first half second costs").
//
//	go test -run '^$' -bench RequestInFlight ./sidecar/server/
func BenchmarkRequestInFlight(b *testing.B) {
	const inFlight = 1000 // under the listener's default concurrency limit
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	warn := new(slog.LevelVar) // no access log: its lines would count in the heap
	warn.Set(slog.LevelWarn)
	sc := startSidecar(b, configFor("default/m", []string{ln.Addr().String()}, `[{type: Header, name: X-Session-ID}]`, ""),
		func(d *server.Deps) { d.LogLevel = warn })
	// The backend: one goroutine reads each request whole, holds inFlight
	// of them, and answers them all on release.
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(done) // before ln.Close: a backend waiting on a batch returns
	go func() {
		for {
			var conns []net.Conn
			for len(conns) < inFlight {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					c.Close()
					return
				}
				io.Copy(io.Discard, req.Body)
				conns = append(conns, c)
			}
			select {
			case held <- struct{}{}:
			case <-done:
			}
			select {
			case <-release:
			case <-done:
			}
			for _, c := range conns {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				c.Close()
			}
		}
	}()
	addr := strings.TrimPrefix(sc.url("default/m", ""), "http://")
	// A batch's connections close after it; the next one starts from
	// where the sidecar was before it (its goroutines gone, their memory
	// collected), so each batch measures only what it holds.
	idle := runtime.NumGoroutine()
	settle := func() {
		testkit.Eventually(b, 10*time.Second, "the batch's goroutines ended", func() bool { return runtime.NumGoroutine() <= idle })
	}
	// The process's CPU over a batch, the collections of memory() left
	// out: the benchmark's client and backend are in it too, so it is for
	// comparing builds, not a sidecar's cost.
	var stacks, heap float64
	var cpu time.Duration
	session := 0
	for range b.N {
		b.StopTimer()
		settle()
		stacks0, heap0 := heldMemory()
		cpu0 := threads.ProcessCPU()
		b.StartTimer()
		clients := make([]net.Conn, inFlight)
		for i := range clients {
			session++
			clients[i] = sendChat(b, addr, fmt.Sprint("in-flight-", session))
		}
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			b.Fatal("the backend did not receive every request")
		}
		b.StopTimer()
		time.Sleep(100 * time.Millisecond) // past the watches' start
		cpu += threads.ProcessCPU() - cpu0
		stacks1, heap1 := heldMemory()
		cpu1 := threads.ProcessCPU()
		stacks += float64(stacks1) - float64(stacks0)
		heap += float64(heap1) - float64(heap0)
		release <- struct{}{}
		for _, c := range clients {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("answer: %v %v", resp, err)
			}
			c.Close()
		}
		settle()
		cpu += threads.ProcessCPU() - cpu1
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*inFlight), "cpu-ns/req")
	b.ReportMetric(stacks/float64(b.N*inFlight), "stack-B/req")
	b.ReportMetric(heap/float64(b.N*inFlight), "heap-B/req")
}

// sendChat opens a connection to addr and writes a small chat request of
// session on it.
func sendChat(b *testing.B, addr, session string) net.Conn {
	const body = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\nX-Session-ID: %s\r\nContent-Length: %d\r\n\r\n%s", session, len(body), body)
	return c
}

// heldMemory is the process's goroutine stacks and live heap, bytes.
func heldMemory() (stacks, heap uint64) {
	// Twice: the first collection moves what sync.Pools hold (idle
	// 4 KiB buffers among them) to their victim caches, the second
	// frees it, so the heap is what is held.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse, m.HeapAlloc
}

// BenchmarkIdleConnection is the memory a keep-alive client connection
// holds between its requests, as a router's pool of connections to its
// sidecar does between bursts: an operation is a batch of idle
// connections, each opened and given one request of its own session,
// answered, and kept; with all of them idle, the goroutine stacks and
// live heap they hold are reported per connection. The heap includes the
// benchmark's side of each connection (its net.Conn; the reader of its
// answer is garbage by then) and the session's binding. `bench hop -idle-conns` measures the same
// as resident memory of a running sidecar, beside other proxies
// (docs/hop-cost.md "Idle keep-alive connections, and an idle sidecar").
//
//	go test -run '^$' -bench IdleConnection ./sidecar/server/
func BenchmarkIdleConnection(b *testing.B) {
	const idleConns = 1000
	warn := new(slog.LevelVar) // no access log: its lines would count in the heap
	warn.Set(slog.LevelWarn)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	defer backend.Close()
	sc := startSidecar(b, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""),
		func(d *server.Deps) { d.LogLevel = warn })
	addr := strings.TrimPrefix(sc.url("default/m", ""), "http://")
	idle := runtime.NumGoroutine()
	var stacks, heap float64
	session := 0
	for range b.N {
		b.StopTimer()
		testkit.Eventually(b, 10*time.Second, "the batch's goroutines ended", func() bool { return runtime.NumGoroutine() <= idle })
		stacks0, heap0 := heldMemory()
		b.StartTimer()
		clients := make([]net.Conn, idleConns)
		for i := range clients {
			session++
			c := sendChat(b, addr, fmt.Sprint("idle-", session))
			clients[i] = c
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 || resp.Close {
				b.Fatalf("answer: %v %v", resp, err)
			}
			io.Copy(io.Discard, resp.Body)
		}
		b.StopTimer()
		stacks1, heap1 := heldMemory()
		stacks += float64(stacks1) - float64(stacks0)
		heap += float64(heap1) - float64(heap0)
		for _, c := range clients {
			c.Close()
		}
		b.StartTimer()
	}
	b.ReportMetric(stacks/float64(b.N*idleConns), "stack-B/conn")
	b.ReportMetric(heap/float64(b.N*idleConns), "heap-B/conn")
}

// post sends one benchmark request with the session header and reads the
// whole answer: its status and how many body bytes came.
func post(b *testing.B, client *http.Client, url, body string) (status int, n int64) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("X-Session-ID", "bench-session")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, n
}
