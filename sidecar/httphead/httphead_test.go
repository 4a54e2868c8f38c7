package httphead

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// requestSeeds are heads Request must take (the first part) or leave to
// net/http (the second), and the fuzzers' seeds.
var (
	takenRequests = []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nX-Session-ID: s-42\r\nContent-Length: 17\r\n\r\n{\"model\":\"llama\"}",
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /x?q=1&session_id=abc HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
		"GET /x HTTP/1.0\r\n\r\n",
		"GET http://other/p HTTP/1.1\r\nHost: ignored\r\nx-lower-case: v\r\nCONTENT-length:  3 \t\r\n\r\nabcdef",
		"POST / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nPragma: no-cache\r\nContent-Length: 0\r\nA: 1\r\nA: 2\r\nEmpty:\r\nObs: caf\xc3\xa9\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nshort",
		"DELETE /a%20b HTTP/1.1\r\nhost: a\r\nTrailer: X\r\nCookie: a=b; c=d\r\nAuthorization: Bearer x.y.z\r\n\r\n",
		// Targets of originForm's and net/url's.
		"GET /v1/models? HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a??b HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET //x/y HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a!b'(c)*[d]|e HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /p?q=#f&x=%zz HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /caf\xc3\xa9?q=\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	}
	leftRequests = []string{
		"GET / HTTP/1.1\nHost: a\n\n",                  // bare LF
		"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", // obs-fold
		"GET / HTTP/1.1\r\nHost : a\r\n\r\n",           // space before the colon
		"GET / HTTP/1.1\r\nHo\x01st: a\r\n\r\n",        // invalid name
		"GET / HTTP/1.1\r\nHost: a\x7f\r\n\r\n",        // invalid value
		"GET / HTTP/2.0\r\nHost: a\r\n\r\n",            // version
		"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n",    // CONNECT
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n",           // not all here
		"\r\nGET / HTTP/1.1\r\n\r\n",              // no start line
		"GET noslash HTTP/1.1\r\nHost: a\r\n\r\n", // a target net/url refuses
		"GET / HTTP/1.1\r\n: empty name\r\n\r\n",
		"GET / HTTP/1.1\r\nNo colon\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",
	}
)

var (
	takenResponses = []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 5\r\nRetry-After: 1\r\n\r\nbusy!",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200\r\nContent-Length: 4\r\nPragma: no-cache\r\n\r\nab",
		"HTTP/1.1   404   Not  Found\r\ncontent-length: 0\r\nSet-Cookie: a\r\nSet-Cookie: b\r\n\r\n",
		"HTTP/1.1 999 Odd\r\nContent-Length: 0\r\nTrailer: X\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A: 1\r\ncontent-type: text/html\r\nX-A: 2\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, close\r\nContent-Length: 0\r\nConnection: x\r\nCache-Control: no-store\r\nPragma: no-cache\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: x, keep-alive\r\nContent-Length: 0\r\n\r\n",
	}
	leftResponses = []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
		"HTTP/1.1 20x OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 +20 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	}
)

// requestFields are the fields of a request ReadRequest sets.
type requestFields struct {
	Method, Proto, Host, RequestURI string
	ProtoMajor, ProtoMinor          int
	URL                             any
	Header                          http.Header
	ContentLength                   int64
	TransferEncoding                []string
	Close                           bool
	Trailer                         http.Header
}

func fieldsOf(r *http.Request) requestFields {
	return requestFields{r.Method, r.Proto, r.Host, r.RequestURI, r.ProtoMajor, r.ProtoMinor, *r.URL, r.Header,
		r.ContentLength, r.TransferEncoding, r.Close, r.Trailer}
}

// message is what a check compares of a request or a response: the
// fields a reader sets, and the body and length it framed.
type message struct {
	fields any
	body   io.ReadCloser
	length int64
}

// check: if parse (httphead's) takes raw, read (net/http's) reads from it
// the same message, head length and body.
func check(t *testing.T, raw []byte, parse func([]byte) (message, int, bool), read func(*bufio.Reader) (message, error)) (taken bool) {
	t.Helper()
	got, n, ok := parse(raw)
	if !ok {
		if got.fields != nil || n != 0 {
			t.Fatalf("declined with a message or a length: %q", raw)
		}
		return false
	}
	src := bytes.NewReader(raw)
	br := bufio.NewReader(src)
	want, err := read(br)
	if err != nil {
		t.Fatalf("took what net/http refuses (%v): %q", err, raw)
	}
	if read := len(raw) - br.Buffered() - src.Len(); read != n {
		t.Fatalf("head of %d bytes, net/http read %d: %q", n, read, raw)
	}
	if !reflect.DeepEqual(got.fields, want.fields) {
		t.Fatalf("for %q:\n got %+v\nwant %+v", raw, got.fields, want.fields)
	}
	if got.body != nil || (want.body == http.NoBody) != (got.length == 0) {
		t.Fatalf("body: got %v, net/http's %T with length %d", got.body, want.body, want.length)
	}
	checkBody(t, raw[n:], got.length, want.body)
	return true
}

func checkRequest(t *testing.T, raw []byte) (taken bool) {
	t.Helper()
	of := func(r *http.Request) message { return message{fieldsOf(r), r.Body, r.ContentLength} }
	return check(t, raw, func(raw []byte) (message, int, bool) {
		r, n, ok := Request(raw)
		// A connection's parser, after requests of other shapes: what it
		// makes of raw must not depend on them.
		used := usedRequests(false)
		ru, nu, oku := used.Request(raw)
		if nu != n || oku != ok || (r == nil) != (ru == nil) || r != nil && !reflect.DeepEqual(fieldsOf(r), fieldsOf(ru)) {
			t.Fatalf("a used parser read %q otherwise:\n got %+v\nwant %+v", raw, ru, r)
		}
		checkListedRequest(t, raw, r, n, ok)
		if r == nil {
			return message{}, n, ok
		}
		return of(ru), n, ok
	}, func(br *bufio.Reader) (message, error) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return message{}, err
		}
		return of(r), nil
	})
}

// usedRequests is a Requests that has parsed every seed, taken or left
// (and forgotten one on the way), as a connection's has parsed others
// before; Listed or not.
func usedRequests(listed bool) *Requests {
	r := Requests{Listed: listed}
	for i, s := range append(takenRequests, leftRequests...) {
		r.Request([]byte(s))
		if i == len(takenRequests)/2 {
			r.Forget()
		}
	}
	// Last, a head whose fields were parsed and which was then declined
	// (its version): they must not show in the next.
	r.Request([]byte("GET / HTTP/2.0\r\nHost: a\r\nX-Stale: 1\r\n\r\n"))
	return &r
}

// checkListedRequest: a used Listed parser takes raw as one that is not
// (r, n, ok) and reads the same request, but for its Header, which is
// empty: its fields are listed instead, holding what r's Header holds,
// value by value in the same order.
func checkListedRequest(t *testing.T, raw []byte, r *http.Request, n int, ok bool) {
	t.Helper()
	p := usedRequests(true)
	rl, nl, okl := p.Request(raw)
	if nl != n || okl != ok || (rl == nil) != (r == nil) {
		t.Fatalf("listed, %q read otherwise: %v %d %v, not %v %d %v", raw, rl, nl, okl, r, n, ok)
	}
	if rl == nil {
		if _, listed := p.Fields(rl); listed {
			t.Fatalf("listed, %q declined but listed", raw)
		}
		return
	}
	if len(rl.Header) != 0 {
		t.Fatalf("listed, %q: header %v", raw, rl.Header)
	}
	got, want := fieldsOf(rl), fieldsOf(r)
	got.Header = want.Header
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listed, %q:\n got %+v\nwant %+v", raw, got, want)
	}
	fields, listed := p.Fields(rl)
	if !listed {
		t.Fatalf("listed, %q: no fields", raw)
	}
	if header := HeaderOf(fields); !reflect.DeepEqual(header, r.Header) {
		t.Fatalf("listed, %q: fields %v, header %v", raw, fields, r.Header)
	}
	if _, listed := (&Requests{}).Fields(rl); listed {
		t.Fatal("another parser's request listed")
	}
}

// usedResponses is the same for Responses, Listed or not.
func usedResponses(listed bool) *Responses {
	p := Responses{Listed: listed}
	post, _ := http.NewRequest(http.MethodPost, "http://b/", nil)
	for i, s := range append(takenResponses, leftResponses...) {
		p.Response([]byte(s), post)
		if i == len(takenResponses)/2 {
			p.Forget()
		}
	}
	p.Response([]byte("HTTP/1.1 204 No Content\r\nX-Stale: 1\r\n\r\n"), post) // parsed, then declined
	return &p
}

// TestForget: a forgotten message leaves nothing of it reachable from
// its parser.
func TestForget(t *testing.T) {
	var r Requests
	if _, _, ok := r.Request([]byte(takenRequests[0])); !ok {
		t.Fatal("declined")
	}
	r.Forget()
	if !reflect.DeepEqual(r.req, http.Request{}) || r.url != (url.URL{}) {
		t.Fatalf("request kept: %+v %+v", r.req, r.url)
	}
	checkForgotten(t, &r.room)
	for _, listed := range []bool{false, true} {
		p := Responses{Listed: listed}
		resp, _, ok := p.Response([]byte(takenResponses[0]), nil)
		if !ok {
			t.Fatal("declined")
		}
		if _, ok := p.Fields(resp); ok != listed {
			t.Fatalf("Listed %v: fields listed %v", listed, ok)
		}
		p.Forget()
		if !reflect.DeepEqual(p.resp, http.Response{}) {
			t.Fatalf("response kept: %+v", p.resp)
		}
		if _, ok := p.Fields(resp); ok {
			t.Fatal("fields of a forgotten response")
		}
		checkForgotten(t, &p.room)
	}
}

func checkForgotten(t *testing.T, r *room) {
	t.Helper()
	if r.header == nil || len(r.header) != 0 {
		t.Fatalf("header map dropped or kept: %v", r.header)
	}
	for i, v := range r.values[:cap(r.values)] {
		if v != "" {
			t.Fatalf("value %d kept: %q", i, v)
		}
	}
	if len(r.list) != 0 {
		t.Fatalf("list kept: %v", r.list)
	}
	for i, f := range r.list[:cap(r.list)] {
		if f != (Field{}) {
			t.Fatalf("field %d kept: %v", i, f)
		}
	}
}

func checkResponse(t *testing.T, raw []byte, req *http.Request) (taken bool) {
	t.Helper()
	of := func(r *http.Response) message { return message{responseFieldsOf(r), r.Body, r.ContentLength} }
	return check(t, raw, func(raw []byte) (message, int, bool) {
		r, n, ok := Response(raw, req)
		used := usedResponses(false)
		ru, nu, oku := used.Response(raw, req)
		if nu != n || oku != ok || (r == nil) != (ru == nil) || r != nil && !reflect.DeepEqual(responseFieldsOf(r), responseFieldsOf(ru)) {
			t.Fatalf("a used parser read %q otherwise:\n got %+v\nwant %+v", raw, ru, r)
		}
		checkListed(t, raw, req, r, n, ok)
		if r == nil {
			return message{}, n, ok
		}
		return of(ru), n, ok
	}, func(br *bufio.Reader) (message, error) {
		r, err := http.ReadResponse(br, req)
		if err != nil {
			return message{}, err
		}
		return of(r), nil
	})
}

// checkListed: a used Listed parser takes raw as one that is not (r,
// n, ok), its fields hold what r's Header holds, value by value in the
// same order, and its Header only r's Content-Type.
func checkListed(t *testing.T, raw []byte, req *http.Request, r *http.Response, n int, ok bool) {
	t.Helper()
	p := usedResponses(true)
	rl, nl, okl := p.Response(raw, req)
	if nl != n || okl != ok || (rl == nil) != (r == nil) {
		t.Fatalf("listed, %q read otherwise: %v %d %v, not %v %d %v", raw, rl, nl, okl, r, n, ok)
	}
	if rl == nil {
		return
	}
	fields, listed := p.Fields(rl)
	if !listed {
		t.Fatalf("listed, %q: no fields", raw)
	}
	got, want := responseFieldsOf(rl), responseFieldsOf(r)
	got.Header = HeaderOf(fields)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listed, %q:\n got %+v\nwant %+v", raw, got, want)
	}
	types := http.Header{}
	if v, ok := r.Header["Content-Type"]; ok {
		types["Content-Type"] = v
	}
	if !reflect.DeepEqual(rl.Header, types) {
		t.Fatalf("listed, %q: header %v, want %v", raw, rl.Header, types)
	}
}

// checkBody: a Body of length bytes over rest reads what net/http's
// body reads, in reads of every size up to a few bytes, and ends as it
// does.
func checkBody(t *testing.T, rest []byte, length int64, body io.Reader) {
	t.Helper()
	wantBody, wantErr := io.ReadAll(body)
	for size := 1; size <= 4; size++ {
		var b Body
		b.Reset(bufio.NewReaderSize(bytes.NewReader(rest), 16), length)
		var gotBody []byte
		var gotErr error
		p := make([]byte, size)
		for {
			n, err := b.Read(p)
			gotBody = append(gotBody, p[:n]...)
			if err != nil {
				if err != io.EOF {
					gotErr = err
				}
				break
			}
		}
		if !bytes.Equal(gotBody, wantBody) || gotErr != wantErr {
			t.Fatalf("body in reads of %d: %q, %v; net/http read %q, %v", size, gotBody, gotErr, wantBody, wantErr)
		}
	}
}

type responseFields struct {
	Status, Proto          string
	StatusCode             int
	ProtoMajor, ProtoMinor int
	Header                 http.Header
	ContentLength          int64
	TransferEncoding       []string
	Close                  bool
	Trailer                http.Header
	Request                *http.Request
}

func responseFieldsOf(r *http.Response) responseFields {
	return responseFields{r.Status, r.Proto, r.StatusCode, r.ProtoMajor, r.ProtoMinor, r.Header, r.ContentLength,
		r.TransferEncoding, r.Close, r.Trailer, r.Request}
}

// TestRequestAsNetHTTP: the heads of a proxy's traffic are taken, and
// read as net/http reads them; the others are left to it.
func TestRequestAsNetHTTP(t *testing.T) {
	for _, raw := range takenRequests {
		if !checkRequest(t, []byte(raw)) {
			t.Errorf("left to net/http: %q", raw)
		}
	}
	for _, raw := range leftRequests {
		if checkRequest(t, []byte(raw)) {
			t.Errorf("taken: %q", raw)
		}
	}
}

func TestResponseAsNetHTTP(t *testing.T) {
	get, _ := http.NewRequest(http.MethodPost, "http://b/v1/chat/completions", nil)
	for _, raw := range takenResponses {
		if !checkResponse(t, []byte(raw), get) {
			t.Errorf("left to net/http: %q", raw)
		}
	}
	for _, raw := range leftResponses {
		if checkResponse(t, []byte(raw), get) {
			t.Errorf("taken: %q", raw)
		}
	}
	head, _ := http.NewRequest(http.MethodHead, "http://b/", nil)
	if checkResponse(t, []byte(takenResponses[0]), head) {
		t.Error("an answer to HEAD was taken")
	}
}

// FuzzRequest: whatever head Request takes, net/http reads as the same
// request, head length and body.
//
//	go test -run '^$' -fuzz FuzzRequest ./sidecar/httphead/
func FuzzRequest(f *testing.F) {
	for _, s := range append(takenRequests, leftRequests...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkRequest(t, raw) })
}

// FuzzResponse: the same for responses, to a GET, a POST or a HEAD.
//
//	go test -run '^$' -fuzz FuzzResponse ./sidecar/httphead/
func FuzzResponse(f *testing.F) {
	for _, s := range append(takenResponses, leftResponses...) {
		f.Add([]byte(s), uint8(1))
	}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodHead}
	f.Fuzz(func(t *testing.T, raw []byte, m uint8) {
		req, _ := http.NewRequest(methods[int(m)%len(methods)], "http://b/", nil)
		checkResponse(t, raw, req)
	})
}

// TestBodyEndsWithItsLastBytes: the read that takes a body's last bytes
// reports its end (a transport then reuses the connection without
// another read), and nothing past the body is read.
func TestBodyEndsWithItsLastBytes(t *testing.T) {
	br := bufio.NewReader(bytes.NewReader([]byte("abcdNEXT")))
	var b Body
	b.Reset(br, 4)
	p := make([]byte, 10)
	if n, err := b.Read(p); n != 4 || err != io.EOF || string(p[:n]) != "abcd" {
		t.Fatalf("read %q, %v; want abcd with io.EOF", p[:n], err)
	}
	if n, err := b.Read(p); n != 0 || err != io.EOF {
		t.Fatalf("after the end: %d, %v", n, err)
	}
	if rest, _ := io.ReadAll(br); string(rest) != "NEXT" {
		t.Fatalf("left on the connection: %q", rest)
	}
}

// TestCanonicalCacheIsBounded: names in other forms are canonicalized
// alike from the cache and without it, and a client inventing names
// grows the cache to its bound and no further.
func TestCanonicalCacheIsBounded(t *testing.T) {
	for i := range 2 * maxCached {
		name := "x-invented-" + strconv.Itoa(i)
		for range 2 { // made, then (while there is room) cached
			if got, want := canonical(name), http.CanonicalHeaderKey(name); got != want {
				t.Fatalf("canonical(%q) = %q, want %q", name, got, want)
			}
		}
	}
	long := "x-" + strings.Repeat("a", maxCachedLen)
	if got := canonical(long); got != http.CanonicalHeaderKey(long) {
		t.Fatalf("canonical of a long name: %q", got)
	}
	if n := len(*cache.Load()); n > maxCached {
		t.Fatalf("%d names cached, bound %d", n, maxCached)
	}
	if _, ok := (*cache.Load())[long]; ok {
		t.Fatal("a name over maxCachedLen was cached")
	}
}

// TestPlainValue: a plain value is one net/http's writers leave as it is
// (trimmed of spaces and tabs, line breaks made spaces).
func TestPlainValue(t *testing.T) {
	for v, want := range map[string]bool{
		"": true, "abc": true, "a b\tc": true, "é": true,
		" a": false, "a ": false, "\ta": false, "a\t": false, "a\rb": false, "a\nb": false, "\n": false,
	} {
		if got := PlainValue(v); got != want {
			t.Errorf("PlainValue(%q) = %v, want %v", v, got, want)
		}
		// What both writers do to a value that is not plain.
		if want && textproto.TrimString(strings.NewReplacer("\r", " ", "\n", " ").Replace(v)) != v {
			t.Errorf("%q is plain, yet net/http would change it", v)
		}
	}
}
