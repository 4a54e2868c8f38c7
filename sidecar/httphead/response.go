package httphead

import (
	"net/http"
	"strings"
)

// Response parses the response head at the start of buf, the answer to
// req, and returns the response http.ReadResponse would, and the head's
// length; the caller consumes that many bytes and sets the Body as for
// Request. It returns ok false, and nothing, for a head it leaves to
// http.ReadResponse: those Request leaves to net/http, and any response
// whose body is not framed by one Content-Length (1xx, 204 and 304, an
// answer to HEAD, a chunked or close-delimited body).
func Response(buf []byte, req *http.Request) (resp *http.Response, n int, ok bool) {
	return new(Responses).Response(buf, req)
}

// Responses parses responses one after another into the same response,
// header map and value slab, as Requests does requests: a response it
// returns is valid until its next Response or Forget. Four allocations
// of the five a response's head costs are spared.
type Responses struct {
	// Listed: a response's header fields go into a list, in the order
	// they came (Fields), and its Header holds only its Content-Type
	// values: what a proxy that forwards the fields as they are reads of
	// them. The map of every field is not built.
	Listed bool

	resp   http.Response
	room   room
	listed bool // resp's fields are room.list
}

// Forget drops the last response, so that nothing of it stays reachable
// from p.
func (p *Responses) Forget() {
	p.resp, p.listed = http.Response{}, false
	p.room.forget()
}

// Fields returns the header fields of resp in the order they came, and
// true, when resp is the response p last parsed Listed; false for any
// other (one net/http read, for a head this package left to it). They
// are what net/http's Header would hold, field by field: canonical
// names, trimmed values, Cache-Control added after a Pragma: no-cache,
// Connection dropped when it says close (HTTP/1.1). Valid, like resp,
// until p's next Response or Forget; the caller may reorder or shorten
// the slice.
func (p *Responses) Fields(resp *http.Response) ([]Field, bool) {
	if !p.listed || resp != &p.resp {
		return nil, false
	}
	return p.room.list, true
}

// Response is the package's Response, into p's response.
func (p *Responses) Response(buf []byte, req *http.Request) (resp *http.Response, n int, ok bool) {
	p.listed = false
	n, fields := find(buf)
	if n == 0 || req != nil && req.Method == http.MethodHead {
		return nil, 0, false
	}
	h, ok := parse(buf, n, fields, false, &p.room, p.Listed)
	if !ok || h.te {
		return nil, 0, false
	}
	proto, status, ok := strings.Cut(h.first, " ")
	if !ok {
		return nil, 0, false
	}
	major, minor, ok := version(proto)
	if !ok {
		return nil, 0, false
	}
	status = strings.TrimLeft(status, " ")
	code, ok := statusCode(status)
	if !ok || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, 0, false
	}
	length, ok := h.contentLength()
	if !ok || length < 0 {
		return nil, 0, false
	}
	h.fixPragmaCacheControl()
	p.resp = http.Response{
		Status:        status,
		StatusCode:    code,
		Proto:         proto,
		ProtoMajor:    major,
		ProtoMinor:    minor,
		Header:        h.header,
		ContentLength: length,
		Close:         h.shouldClose(major, minor, true),
		Request:       req,
	}
	p.listed = p.Listed
	return &p.resp, n, true
}

// statusCode is the three digits a status starts with, up to a space or
// its end (ReadResponse's reading, without Atoi's sign).
func statusCode(status string) (int, bool) {
	code, _, _ := strings.Cut(status, " ")
	if len(code) != 3 {
		return 0, false
	}
	n := 0
	for i := 0; i < 3; i++ {
		c := code[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
