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
	n, fields := find(buf)
	if n == 0 {
		return nil, 0, false
	}
	h, ok := parse(buf, n, fields, true)
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
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, 0, false
	}
	host := u.Host
	if host == "" {
		host = h.host
	}
	h.fixPragmaCacheControl()
	close := h.shouldClose(major, minor, false)
	req = &http.Request{
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
	return req, n, true
}
