package httphead

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Request parses the request head at the start of buf and returns the
// request http.ReadRequest would, and the head's length; the caller
// consumes that many bytes and sets the Body: http.NoBody when
// ContentLength is 0, else a reader of ContentLength bytes that fails
// with io.ErrUnexpectedEOF if they end early. It returns ok false, and
// nothing, for a head it leaves to http.ReadRequest: not all in buf,
// a line ending in a bare LF or folded, an invalid field, a version other
// than HTTP/1.0 and 1.1, a CONNECT, a Transfer-Encoding, anything but one
// valid Content-Length (or none), several Host fields, a target net/url
// refuses.
func Request(buf []byte) (req *http.Request, n int, ok bool) {
	n, fields := find(buf)
	if n == 0 {
		return nil, 0, false
	}
	h, header, ok := parse(buf, n, fields)
	if !ok {
		return nil, 0, false
	}
	method, rest, ok1 := strings.Cut(h.first, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "CONNECT" || !validMethod(method) {
		return nil, 0, false
	}
	major, minor, ok := version(proto)
	if !ok {
		return nil, 0, false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, 0, false
	}
	if _, te := header["Transfer-Encoding"]; te || len(header["Host"]) > 1 {
		return nil, 0, false
	}
	length, ok := contentLength(header)
	if !ok {
		return nil, 0, false
	}
	host := u.Host
	if host == "" {
		if v := header["Host"]; len(v) > 0 {
			host = v[0]
		}
	}
	fixPragmaCacheControl(header)
	close := shouldClose(major, minor, header, false)
	delete(header, "Host") // ReadRequest's last step
	req = &http.Request{
		Method:        method,
		URL:           u,
		Proto:         proto,
		ProtoMajor:    major,
		ProtoMinor:    minor,
		Header:        header,
		ContentLength: max(length, 0), // a request without one has none
		Close:         close,
		Host:          host,
		RequestURI:    target,
	}
	return req, n, true
}

// validMethod is net/http's: a token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return true
}
