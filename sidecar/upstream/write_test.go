package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

// viaStdlib is what Request.Write writes for req, as roundTrip calls it.
func viaStdlib(req *http.Request) (string, error) {
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	err := req.Write(oneWrite{bw})
	bw.Flush()
	return b.String(), err
}

// viaFast is what writeRequest writes, and whether it wrote at all.
func viaFast(req *http.Request, trace *httptrace.ClientTrace) (string, bool, error) {
	var b bytes.Buffer
	bw := bufio.NewWriterSize(&b, 64) // small: the body crosses buffer flushes
	handled, err := writeRequest(bw, req, trace, nil, false)
	bw.Flush()
	return b.String(), handled, err
}

// fuzzRequest builds a request from the fuzzer's values, twice (a
// request's body is read once).
func fuzzRequest(method, host, target, k1, v1, k2, v2, ua string, uaSet bool, body string, declared int64, bodyNil bool) (*http.Request, *http.Request, bool) {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, nil, false
	}
	make1 := func() *http.Request {
		uc := *u
		uc.Scheme, uc.Host = "http", host
		r := &http.Request{Method: method, URL: &uc, Host: host, Header: http.Header{}, ContentLength: declared}
		r.Header[k1] = append(r.Header[k1], v1)
		r.Header[k2] = append(r.Header[k2], v2)
		if uaSet {
			r.Header["User-Agent"] = []string{ua}
		}
		if !bodyNil {
			r.Body = io.NopCloser(strings.NewReader(body))
		}
		return r
	}
	return make1(), make1(), true
}

func FuzzWriteRequest(f *testing.F) {
	f.Add("POST", "10.0.0.1:8000", "/v1/completions?x=1", "X-Session-Id", "abc", "Accept", "a, b", "", false, `{"prompt":"hi"}`, int64(15), false)
	f.Add("GET", "backend:80", "/v1/models", "X-A", " spaced \t", "x-lower", "v", "router/1", true, "", int64(0), true)
	f.Add("DELETE", "h", "/a%2Fb/c%20d", "Bad Name", "v", "X-B", "line\r\nbreak", "", true, "", int64(0), true)
	f.Add("PUT", "h:1", "/", "Content-Length", "99", "Transfer-Encoding", "chunked", "ua\nx", true, "short", int64(9), false)
	f.Add("PATCH", "bad host/x", "/", "Host", "other", "Trailer", "X", "", false, "longer than said", int64(4), false)
	f.Add("OPTIONS", "ünï:80", "*", "X-C", "é", "X-C", "2", "", false, "", int64(0), true)
	f.Fuzz(func(t *testing.T, method, host, target, k1, v1, k2, v2, ua string, uaSet bool, body string, declared int64, bodyNil bool) {
		a, b, ok := fuzzRequest(method, host, target, k1, v1, k2, v2, ua, uaSet, body, declared, bodyNil)
		if !ok {
			return
		}
		var wrote []error
		trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) { wrote = append(wrote, i.Err) }}
		fast, handled, ferr := viaFast(a, trace)
		if !handled {
			if fast != "" || len(wrote) != 0 {
				t.Fatalf("not handled, yet wrote %q (WroteRequest %d times)", fast, len(wrote))
			}
			return
		}
		std, serr := viaStdlib(b)
		if (ferr == nil) != (serr == nil) || ferr != nil && ferr.Error() != serr.Error() {
			t.Fatalf("errors differ: %v, Request.Write: %v", ferr, serr)
		}
		if serr == nil && fast != std {
			t.Fatalf("wrote\n%q\nRequest.Write wrote\n%q", fast, std)
		}
		if len(wrote) != 1 || !errors.Is(wrote[0], ferr) {
			t.Fatalf("WroteRequest calls %v, want one with %v", wrote, ferr)
		}
		// The same body held whole, as the proxy's is (writeBody's one
		// write): the same bytes, the same error.
		if c, _, _ := fuzzRequest(method, host, target, k1, v1, k2, v2, ua, uaSet, body, declared, bodyNil); c.Body != nil {
			c.Body = &heldReader{*bytes.NewReader([]byte(body))}
			held, _, herr := viaFast(c, nil)
			if held != fast || (herr == nil) != (ferr == nil) || herr != nil && herr.Error() != ferr.Error() {
				t.Fatalf("a body held whole: wrote\n%q (%v)\nwhere one read in parts wrote\n%q (%v)", held, herr, fast, ferr)
			}
		}
	})
}

// heldReader is a body held whole, as the proxy's (a bytes.Reader).
type heldReader struct{ bytes.Reader }

func (*heldReader) Close() error { return nil }

// writeCounter counts the writes it is given.
type writeCounter struct {
	n     int
	bytes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.n++
	w.bytes += len(p)
	return len(p), nil
}

// TestAHeldBodyGoesInOneWrite: a body of 256 KiB the proxy holds whole
// reaches the connection in two writes (the head with the body's first
// bytes, then the rest), where a body read in parts takes one per
// buffer (64).
func TestAHeldBodyGoesInOneWrite(t *testing.T) {
	prompt := bytes.Repeat([]byte("x"), 256<<10)
	for _, c := range []struct {
		name string
		body io.ReadCloser
		max  int
	}{
		{"held whole", &heldReader{*bytes.NewReader(prompt)}, 2},
		{"read in parts", io.NopCloser(bytes.NewBuffer(prompt)), 1 << 10},
	} {
		req, err := http.NewRequest("POST", "http://10.0.0.1:8000/v1/chat/completions", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Body, req.ContentLength = c.body, int64(len(prompt))
		var w writeCounter
		bw := bufio.NewWriterSize(&w, 4096)
		if handled, err := writeRequest(bw, req, nil, nil, false); !handled || err != nil {
			t.Fatalf("%s: handled %v, %v", c.name, handled, err)
		}
		bw.Flush()
		if w.n > c.max || w.bytes < len(prompt) {
			t.Errorf("%s: %d bytes in %d writes, want at most %d", c.name, w.bytes, w.n, c.max)
		}
		if c.max > 2 && w.n <= 2 {
			t.Errorf("%s: %d writes: the test no longer tells the two apart", c.name, w.n)
		}
	}
}

// FuzzWriteRequestFields: a request written with listed fields is the
// request Request.Write writes with those fields as its Header (and no
// User-Agent of Go's), the fields in their order: the same start line,
// Host, Content-Length and body, the same fields name by name, value by
// value.
//
//	go test -run '^$' -fuzz FuzzWriteRequestFields ./sidecar/upstream/
func FuzzWriteRequestFields(f *testing.F) {
	f.Add("POST", "/v1/completions?x=1", "x-session-id", "abc", "Accept", "a, b", "router/1", `{"prompt":"hi"}`, uint8(0))
	f.Add("GET", "/v1/models", "X-A", "1", "X-A", "2", "", "", uint8(3))
	f.Add("PUT", "/", "Host", "other", "Content-Length", "9", "ua", "short", uint8(7))
	f.Fuzz(func(t *testing.T, method, target, k1, v1, k2, v2, ua, body string, order uint8) {
		fields := []httphead.Field{{Name: k1, Value: v1}, {Name: k2, Value: v2}, {Name: "User-Agent", Value: ua}, {Name: "X-Last", Value: "z"}}
		for i := range fields {
			fields[i].Name = http.CanonicalHeaderKey(fields[i].Name)
			if !httpguts.ValidHeaderFieldName(fields[i].Name) || !httpguts.ValidHeaderFieldValue(fields[i].Value) || !httphead.PlainValue(fields[i].Value) {
				return // not a field a proxy lists
			}
		}
		if ua == "" || k1 == "User-Agent" || k2 == "User-Agent" {
			fields = slices.DeleteFunc(fields, func(f httphead.Field) bool { return f.Name == "User-Agent" })
		}
		if order%2 == 1 {
			slices.Reverse(fields)
		}
		mk := func() *http.Request {
			r, err := http.NewRequest(method, "http://10.0.0.1:8000"+target, nil)
			if err != nil || !strings.HasPrefix(target, "/") {
				return nil
			}
			if body != "" {
				r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			}
			return r
		}
		a, b := mk(), mk()
		if a == nil {
			return
		}
		var buf bytes.Buffer
		bw := bufio.NewWriterSize(&buf, 64)
		handled, err := writeRequest(bw, a, nil, fields, true)
		bw.Flush()
		if !handled {
			return
		}
		b.Header = headerOf(fields)
		std, serr := viaStdlib(b)
		if (err == nil) != (serr == nil) {
			t.Fatalf("errors differ: %v, Request.Write: %v", err, serr)
		}
		if err != nil {
			return
		}
		wrote := buf.String()
		got, gerr := http.ReadRequest(bufio.NewReader(&buf))
		want, werr := http.ReadRequest(bufio.NewReader(strings.NewReader(std)))
		if werr != nil {
			// Request.Write wrote what no server reads (a target net/url
			// keeps with a space in its query; a client's request line
			// cannot carry one to the proxy): the same request line, then.
			if line, _, _ := strings.Cut(wrote, "\r\n"); !strings.HasPrefix(std, line+"\r\n") {
				t.Fatalf("request lines differ where Request.Write's is unreadable (%v):\n%q\n%q", werr, wrote, std)
			}
			return
		}
		if gerr != nil {
			t.Fatalf("unreadable where Request.Write's is not: %v\n%q\n%q", gerr, wrote, std)
		}
		gb, _ := io.ReadAll(got.Body)
		wb, _ := io.ReadAll(want.Body)
		if got.Method != want.Method || got.RequestURI != want.RequestURI || got.Host != want.Host ||
			got.ContentLength != want.ContentLength || !bytes.Equal(gb, wb) || !reflect.DeepEqual(got.Header, want.Header) {
			t.Fatalf("wrote a request other than Request.Write's:\n%+v\n%+v", got, want)
		}
		// In their order: the lines after Host, less those the request
		// line's framing writes itself.
		var names []string
		head := strings.SplitN(wrote, "\r\n\r\n", 2)[0]
		for _, line := range strings.Split(head, "\r\n")[2:] {
			if name, _, _ := strings.Cut(line, ":"); name != "Content-Length" {
				names = append(names, name)
			}
		}
		var want2 []string
		for _, f := range fields {
			if f.Name == "User-Agent" || !excluded(f.Name) {
				want2 = append(want2, f.Name)
			}
		}
		if !slices.Equal(names, want2) {
			t.Fatalf("fields written in the order %v, listed %v", names, want2)
		}
	})
}

// TestWriteRequestTakesAProxysRequests: the requests the sidecar sends
// take the fast path; the others are left to Request.Write.
func TestWriteRequestTakesAProxysRequests(t *testing.T) {
	mk := func(f func(r *http.Request)) *http.Request {
		r, _ := http.NewRequest("POST", "http://10.0.0.1:8000/v1/chat/completions", strings.NewReader("{}"))
		r.Header.Set("User-Agent", "")
		f(r)
		return r
	}
	for name, c := range map[string]struct {
		req  *http.Request
		fast bool
	}{
		"a proxied POST":      {mk(func(*http.Request) {}), true},
		"no body":             {mk(func(r *http.Request) { r.Body, r.ContentLength = nil, 0 }), true},
		"chunked":             {mk(func(r *http.Request) { r.ContentLength = -1 }), false},
		"trailers":            {mk(func(r *http.Request) { r.Trailer = http.Header{"X": nil} }), false},
		"close":               {mk(func(r *http.Request) { r.Close = true }), false},
		"IPv6 host":           {mk(func(r *http.Request) { r.Host = "[fe80::1%25eth0]:80" }), false},
		"unknown-length body": {mk(func(r *http.Request) { r.ContentLength = 0 }), false},
	} {
		got, handled, err := viaFast(c.req, nil)
		if handled != c.fast || err != nil {
			t.Errorf("%s: handled %v (err %v), want %v", name, handled, err, c.fast)
		}
		if handled && !strings.HasPrefix(got, "POST /v1/chat/completions HTTP/1.1\r\nHost: 10.0.0.1:8000\r\n") {
			t.Errorf("%s: wrote %q", name, got)
		}
	}
}

// BenchmarkWriteRequest writes the head of a request as the sidecar sends
// one to a backend: a JSON POST with a router's and the sidecar's usual
// fields.
func BenchmarkWriteRequest(b *testing.B) {
	req, _ := http.NewRequest("POST", "http://10.0.0.1:8000/v1/chat/completions", nil)
	req.Header = http.Header{
		"Content-Type":      {"application/json"},
		"Accept":            {"application/json"},
		"X-Session-Id":      {"conversation-4f1c"},
		"X-Request-Id":      {"9efde460-cb79-4159-bf74-7353f7c63b8e"},
		"X-Forwarded-For":   {"127.0.0.1"},
		"X-Forwarded-Proto": {"http"},
		"X-Forwarded-Host":  {"127.0.0.1:17001"},
		"Forwarded":         {"for=127.0.0.1;host=\"127.0.0.1:17001\";proto=http"},
		"User-Agent":        {"router/1.0"},
	}
	bw := bufio.NewWriterSize(io.Discard, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if handled, err := writeRequest(bw, req, nil, nil, false); !handled || err != nil {
			b.Fatal(handled, err)
		}
		bw.Reset(io.Discard)
	}
}

// TestListedFieldsReachRequestWrite: a listed request writeRequest
// leaves to Request.Write (here an IPv6 backend's) still carries its
// listed fields, and no User-Agent of Go's when they have none.
func TestListedFieldsReachRequestWrite(t *testing.T) {
	req, _ := http.NewRequest("POST", "http://[fd00::1]:8000/v1/completions", strings.NewReader("{}"))
	fields := []httphead.Field{{Name: "X-B", Value: "2"}, {Name: "X-A", Value: "1"}, {Name: "X-A", Value: "3"}}
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	if err := writeAny(bw, req, hooks{fields: fields, listed: true}); err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	got, err := http.ReadRequest(bufio.NewReader(&b))
	if err != nil {
		t.Fatal(err)
	}
	if want := (http.Header{"X-A": {"1", "3"}, "X-B": {"2"}, "Content-Length": {"2"}}); !reflect.DeepEqual(got.Header, want) {
		t.Fatalf("wrote %v, want %v", got.Header, want)
	}
}
