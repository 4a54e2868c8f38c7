package httphead

import (
	"net/http"
	"net/url"
	"strings"
)

// Request parses the request head at the start of buf and returns the
// request http.ReadRequest would, and the head's length; the caller
// consumes that many bytes and sets the Body: http.NoBody when
// ContentLength is 0, else a reader of ContentLength bytes that fails
// with io.ErrUnexpectedEOF if they end early. It returns ok false, and
// nothing, for a head it leaves to http.ReadRequest: not all in buf,
// a line ending in a bare LF or folded, an invalid field, more than
// maxFields fields, a version other than HTTP/1.0 and 1.1, a CONNECT, a
// Transfer-Encoding, anything but one valid Content-Length (or none),
// several Host fields, a target net/url refuses.
func Request(buf []byte) (req *http.Request, n int, ok bool) {
	return new(Requests).Request(buf)
}

// Requests parses the requests of one connection, one after another,
// into the same request, URL, header map and value slab: a request it
// returns is valid until its next Request or Forget. Five allocations
// of the six a request's head costs are spared; the one left is the
// string that holds the head, which names and values are slices of, so
// that what a handler keeps of them stays its own.
type Requests struct {
	// Listed: a request's header fields go into a list, in the order
	// they came (Fields), and its Header is empty: the map of every field
	// is not built, for a data path that reads and forwards the fields
	// as a list (docs/hop-cost.md "A lean data path"). The list has room
	// for a few fields more than it holds, for the ones such a path adds.
	Listed bool

	req    http.Request
	url    url.URL
	room   room
	listed bool // req's fields are room.list
}

// Fields returns the header fields of req in the order they came, and
// true, when req is the request r last parsed Listed; false for any
// other (its Header holds them). They are what net/http's Header would
// hold, field by field (Host fields left out, Cache-Control added after
// a Pragma: no-cache). Valid, like req, until r's next Request or
// Forget; the caller may edit the list in place and append to it.
func (r *Requests) Fields(req *http.Request) ([]Field, bool) {
	if !r.listed || req != &r.req {
		return nil, false
	}
	return r.room.list, true
}

// Request is the package's Request, into r's request.
func (r *Requests) Request(buf []byte) (req *http.Request, n int, ok bool) {
	r.listed = false
	n, fields := find(buf)
	if n == 0 {
		return nil, 0, false
	}
	h, ok := parse(buf, n, fields, true, &r.room, r.Listed)
	if !ok {
		return nil, 0, false
	}
	method, rest, ok1 := strings.Cut(h.first, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || method == "CONNECT" || !validName(method) {
		return nil, 0, false
	}
	major, minor, ok := version(proto)
	if !ok || h.te || h.hosts > 1 {
		return nil, 0, false
	}
	length, ok := h.contentLength()
	if !ok {
		return nil, 0, false
	}
	u := &r.url
	if !originForm(target, u) {
		var err error
		if u, err = url.ParseRequestURI(target); err != nil {
			return nil, 0, false
		}
	}
	host := u.Host
	if host == "" {
		host = h.host
	}
	h.fixPragmaCacheControl()
	close := h.shouldClose(major, minor, false)
	r.req = http.Request{
		Method:        method,
		URL:           u,
		Proto:         proto,
		ProtoMajor:    major,
		ProtoMinor:    minor,
		Header:        h.header,
		ContentLength: max(length, 0), // a request without one has none
		Close:         close,
		Host:          host,
		RequestURI:    target,
	}
	r.listed = r.Listed
	return &r.req, n, true
}

// Forget drops the last request, so that a connection waiting for its
// next one keeps nothing of it alive (its head, its body, its context).
func (r *Requests) Forget() {
	r.req, r.listed = http.Request{}, false
	r.url = url.URL{}
	r.room.forget()
}

// originForm sets *u to what url.ParseRequestURI makes of target when
// target is the common shape of a request's: a path from '/' of bytes
// net/url keeps as they are (no escape to undo, none to add), then
// perhaps a query of printable bytes. It reports false, leaving u as it
// was, for anything else (net/url decides those).
func originForm(target string, u *url.URL) bool {
	if target == "" || target[0] != '/' {
		return false
	}
	var path, query string
	force := false
	if q := strings.IndexByte(target, '?'); q < 0 {
		path = target
	} else {
		path, query = target[:q], target[q+1:]
		// url's reading: a lone '?' at the end forces an empty query.
		force = query == ""
	}
	for i := 0; i < len(path); i++ {
		if !pathKeeps[path[i]] {
			return false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query, ForceQuery: force}
	return true
}

// pathKeeps: the bytes a path may hold for originForm, those net/url's
// escaping of a path leaves as they are ('%', which it would unescape,
// and '?' and '#' excluded); learnt from net/url itself.
var pathKeeps [256]bool

func init() {
	for c := 0x21; c < 0x7f; c++ {
		if c == '%' || c == '?' || c == '#' {
			continue
		}
		p := "/" + string(rune(c))
		pathKeeps[c] = (&url.URL{Path: p}).EscapedPath() == p
	}
}

// FieldValue is the value of the first of fields named name (canonical),
// "" for none: Header.Get on a list.
func FieldValue(fields []Field, name string) string {
	for _, f := range fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// HeaderOf is fields as a Header, each name's values in their order.
func HeaderOf(fields []Field) http.Header {
	h := make(http.Header, len(fields))
	for _, f := range fields {
		h[f.Name] = append(h[f.Name], f.Value)
	}
	return h
}
