package downstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

// FuzzConnection sends a client's raw bytes, then its end of input:
// whatever they are, nothing panics, the connection ends, and what the
// client reads back is a sequence of well-formed responses (1xx
// included), each a whole one.
//
//	go test -run '^$' -fuzz FuzzConnection ./sidecar/downstream/
func FuzzConnection(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nshort",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: " + string(make([]byte, 2000)) + "\r\n\r\n",
		"garbage\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/stream" {
			w.Write(b)
			w.(http.Flusher).Flush()
		}
		w.Write(b)
	})
	// Each input goes to a server that hands requests over with their
	// header maps and to one that lists them (ListRequests, the sidecar's).
	var addrs []string
	for _, listed := range []bool{false, true} {
		s := &Server{MaxHeaderBytes: 1024, ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second,
			ListRequests: listed, Handler: handler}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		go s.Serve(ln)
		defer s.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, addr := range addrs {
			checkConnection(t, addr, in)
		}
	})
}

// checkConnection is FuzzConnection's check of one server, at addr.
func checkConnection(t *testing.T, addr string, in []byte) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		c.Write(in)
		c.(*net.TCPConn).CloseWrite()
	}()
	br := bufio.NewReader(c)
	if bytes.Contains(bytes.ToUpper(in), []byte("HEAD")) {
		// A response to HEAD has no body whatever its headers say: a
		// reader that does not know which request it answers cannot
		// tell where it ends. Check only that the connection ends.
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("the connection did not end: %v", err)
		}
		return
	}
	for {
		if _, err := br.Peek(1); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the connection did not end: %v", err)
			}
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("malformed response: %v", err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("response %d: body cut: %v", resp.StatusCode, err)
		}
	}
}

// FuzzWriteHeaderFields: for any response head package httphead lists
// (a backend's, as the proxy forwards them), a client reads from
// WriteHeaderFields what it reads from WriteHeader with the same fields
// put first in the handler's map: statuses, headers, framing, body, and
// whether the connection carries another request.
//
//	go test -run '^$' -fuzz FuzzWriteHeaderFields ./sidecar/downstream/
func FuzzWriteHeaderFields(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 201 Created\r\nSet-Cookie: b=1\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 503 Busy\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n",
		"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	var mu sync.Mutex
	var fields []httphead.Field
	var code int
	var length int64
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fs, c, n := slices.Clone(fields), code, length
		mu.Unlock()
		w.Header().Add("Set-Cookie", "own=1")
		w.Header().Set("X-Own", "1")
		if r.URL.Path == "/fields" {
			w.(*response).WriteHeaderFields(c, fs)
		} else {
			writeFields(struct{ http.ResponseWriter }{w}, c, fs...) // WriteHeader on the merged map
		}
		w.Write(bytes.Repeat([]byte("x"), int(n)))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	addr := ln.Addr().String()
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := httphead.Responses{Listed: true}
		resp, _, ok := p.Response(raw, nil)
		if !ok || resp.ContentLength > 1<<16 {
			return
		}
		fs, _ := p.Fields(resp)
		mu.Lock()
		fields, code, length = fs, resp.StatusCode, resp.ContentLength
		mu.Unlock()
		for _, method := range []string{"GET", "HEAD"} {
			get := func(path string) answer {
				return ask(t, addr, method+" "+path+" HTTP/1.1\r\nHost: x\r\n\r\n", method)
			}
			if got, want := get("/fields"), get("/map"); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s %q:\n got  %+v\nwant %+v (WriteHeader)", method, raw, got, want)
			}
		}
	})
}
