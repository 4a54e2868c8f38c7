package downstream

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

func TestMain(m *testing.M) { goleakMain(m) }

// handlers are the responses the conformance test compares, by path.
var handlers = map[string]http.HandlerFunc{
	"/known-length": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	},
	"/small": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello world") },
	"/large": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write([]byte(strings.Repeat("x", 10<<10)))
	},
	"/flushed": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "data: 2\n\n")
	},
	"/no-content":   func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
	"/not-modified": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotModified) },
	"/unknown-code": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(599); io.WriteString(w, "x") },
	"/trailers": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	},
	"/early-hints": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "final")
	},
	"/echo": func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s %q", r.Method, r.Host, b)
	},
	"/ignore-body": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ignored") },
	"/close": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	},
	"/header-after-write": func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("X-Too-Late", "1")
		io.WriteString(w, "x")
	},
	"/newline-value": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Bad"] = []string{"a\r\nInjected: 1"}
		io.WriteString(w, "x")
	},
	"/short-of-length": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "short")
	},
	// A proxy's response: the backend's fields listed, the handler's own
	// headers beside them (a cookie of its own among the backend's).
	"/fields": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "own=1")
		w.Header().Set("X-Own", "1")
		writeFields(w, http.StatusOK, httphead.Field{Name: "Content-Type", Value: "application/json"},
			httphead.Field{Name: "X-A", Value: "1"}, httphead.Field{Name: "Set-Cookie", Value: "b=1"},
			httphead.Field{Name: "X-A", Value: "2"}, httphead.Field{Name: "Content-Length", Value: "2"})
		io.WriteString(w, "{}")
	},
	"/fields-no-length": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusCreated, httphead.Field{Name: "X-A", Value: "1"})
		io.WriteString(w, "hello")
	},
	"/fields-stream": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusOK, httphead.Field{Name: "Content-Type", Value: "text/event-stream"})
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, strings.Repeat("data: 2\n\n", 500))
	},
	"/fields-encoded": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusOK, httphead.Field{Name: "Content-Encoding", Value: "identity"},
			httphead.Field{Name: "Content-Length", Value: "5"})
		io.WriteString(w, "<html")
	},
	"/fields-sniffed": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusOK, httphead.Field{Name: "Content-Length", Value: "5"})
		io.WriteString(w, "<html")
	},
	"/fields-close": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusOK, httphead.Field{Name: "Connection", Value: "close"},
			httphead.Field{Name: "Content-Length", Value: "3"})
		io.WriteString(w, "bye")
	},
	"/fields-trailer": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusOK, httphead.Field{Name: "Trailer", Value: "X-Sum"},
			httphead.Field{Name: "Content-Type", Value: "text/plain"})
		io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
	},
	"/fields-short": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusOK, httphead.Field{Name: "Content-Length", Value: "10"})
		io.WriteString(w, "short")
	},
	"/fields-no-content": func(w http.ResponseWriter, r *http.Request) {
		writeFields(w, http.StatusNoContent, httphead.Field{Name: "X-A", Value: "1"},
			httphead.Field{Name: "Content-Length", Value: "0"})
	},
	"/fields-handler-length": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		writeFields(w, http.StatusOK, httphead.Field{Name: "X-A", Value: "1"},
			httphead.Field{Name: "Content-Type", Value: "text/plain"})
		io.WriteString(w, "body")
	},
	"/fields-bad-value": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Own-Padded", "\tb ")
		writeFields(w, http.StatusOK, httphead.Field{Name: "X-Bad", Value: "a\r\nInjected: 1"},
			httphead.Field{Name: "X-Padded", Value: " a\t"}, httphead.Field{Name: "X-Bare-Lf", Value: "a\nb"},
			httphead.Field{Name: "Bad Name", Value: "1"}, httphead.Field{Name: "Content-Length", Value: "1"})
		io.WriteString(w, "x")
	},
}

// writeFields sends fields and w's headers with code, as the sidecar's
// proxy does: by WriteHeaderFields where w has it (this package's),
// otherwise (net/http's) with the fields put before w's own values.
func writeFields(w http.ResponseWriter, code int, fields ...httphead.Field) {
	if fw, ok := w.(interface {
		WriteHeaderFields(int, []httphead.Field)
	}); ok {
		fw.WriteHeaderFields(code, fields)
		return
	}
	prependFields(w.Header(), fields)
	w.WriteHeader(code)
}

func mux() http.Handler {
	m := http.NewServeMux()
	for p, h := range handlers {
		m.Handle(p, h)
	}
	return m
}

// exchange is one raw request and what the client saw of it.
type answer struct {
	Status   []int // the 1xx responses, then the final one
	Proto    string
	Header   http.Header
	Length   int64
	TE       []string
	Close    bool
	Body     string
	BodyErr  bool
	Trailer  http.Header
	Reusable bool // a second request on the connection was answered
}

// ask sends raw on a new connection to addr and reads the response the
// way a client does, then tries the connection once more.
func ask(t *testing.T, addr, raw, method string) answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var a answer
	req, _ := http.NewRequest(method, "/", nil)
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			a.Status = append(a.Status, -1)
			return a
		}
		a.Status = append(a.Status, resp.StatusCode)
		if resp.StatusCode >= 200 {
			body, err := io.ReadAll(resp.Body)
			resp.Header.Del("Date")
			a.Proto, a.Header, a.Length, a.TE, a.Close = resp.Proto, resp.Header, resp.ContentLength, resp.TransferEncoding, resp.Close
			a.Body, a.BodyErr, a.Trailer = string(body), err != nil, resp.Trailer
			break
		}
	}
	if a.Close || a.BodyErr {
		return a
	}
	io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err == nil {
		_, err = io.ReadAll(resp.Body)
		a.Reusable = err == nil && resp.StatusCode == 200
	}
	return a
}

func serveBoth(t *testing.T, h http.Handler, opts ...func(*Server)) (std, own string) {
	t.Helper()
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s1 := &http.Server{Handler: h, MaxHeaderBytes: 4 << 10}
	s2 := &Server{Handler: h, MaxHeaderBytes: 4 << 10}
	for _, o := range opts {
		o(s2)
	}
	go s1.Serve(l1)
	go s2.Serve(l2)
	t.Cleanup(func() { s1.Close(); s2.Close() })
	return l1.Addr().String(), l2.Addr().String()
}

// TestAnswersAsNetHTTPDoes sends the same raw requests to net/http's
// server and to this one, the same handlers behind both, and compares
// what a client sees: statuses (1xx included), headers but Date,
// framing, body, trailers, and whether the connection carries another
// request. Listed, this server hands requests of the common shape over
// as lists (ListRequests), which the handlers here read back into the
// Header: the rest (Expect, framing, bodies) must not change.
func TestAnswersAsNetHTTPDoes(t *testing.T) {
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) { testAnswersAsNetHTTPDoes(t, listed) })
	}
}

// unlisted gives a listed request its Header back before h reads it.
func unlisted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l, ok := w.(*response); ok {
			if fields, ok := l.RequestFields(r); ok {
				r.Header = httphead.HeaderOf(fields)
			}
		}
		h.ServeHTTP(w, r)
	})
}

func testAnswersAsNetHTTPDoes(t *testing.T, listed bool) {
	h := mux()
	if listed {
		h = unlisted(h)
	}
	std, own := serveBoth(t, h, func(s *Server) { s.ListRequests = listed })
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	cases := map[string]struct{ raw, method string }{}
	for p := range handlers {
		cases["GET "+p] = struct{ raw, method string }{get(p), "GET"}
		cases["HEAD "+p] = struct{ raw, method string }{"HEAD " + p + " HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD"}
		cases["HTTP/1.0 "+p] = struct{ raw, method string }{"GET " + p + " HTTP/1.0\r\n\r\n", "GET"}
		cases["HTTP/1.0 keep-alive "+p] = struct{ raw, method string }{"GET " + p + " HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "GET"}
		cases["close "+p] = struct{ raw, method string }{"GET " + p + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "GET"}
	}
	post := func(path, body string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	}
	chunked := "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
	more := map[string]struct{ raw, method string }{
		"POST echo":                  {post("/echo", `{"a":1}`), "POST"},
		"POST echo chunked":          {chunked, "POST"},
		"POST ignore small body":     {post("/ignore-body", strings.Repeat("b", 1000)), "POST"},
		"POST ignore large body":     {post("/ignore-body", strings.Repeat("b", 300<<10)), "POST"},
		"absolute URI":               {"GET http://other/echo HTTP/1.1\r\nHost: x\r\n\r\n", "GET"},
		"malformed request line":     {"GARBAGE\r\n\r\n", "GET"},
		"bad header":                 {"GET /small HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n", "GET"},
		"missing host":               {"GET /small HTTP/1.1\r\n\r\n", "GET"},
		"two hosts":                  {"GET /small HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "GET"},
		"malformed host":             {"GET /small HTTP/1.1\r\nHost: a b\r\n\r\n", "GET"},
		"HTTP/2":                     {"GET /small HTTP/2.0\r\nHost: x\r\n\r\n", "GET"},
		"header too large":           {"GET /small HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 10<<10) + "\r\n\r\n", "GET"},
		"unknown transfer encoding":  {"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "POST"},
		"unknown expectation":        {"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\nx", "POST"},
		"length and chunked":         {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", "POST"},
		"two lengths":                {"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "POST"},
		"pipelined":                  {get("/small") + get("/known-length"), "GET"},
		"expect continue, body sent": {"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", "POST"},
		"expect continue, HTTP/1.0":  {"POST /echo HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", "POST"},
		"expect continue in a list":  {"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: foo, 100-continue\r\nContent-Length: 2\r\n\r\nhi", "POST"},
	}
	for k, v := range more {
		cases[k] = v
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			want, got := ask(t, std, c.raw, c.method), ask(t, own, c.raw, c.method)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v (net/http)", got, want)
			}
		})
	}
}
