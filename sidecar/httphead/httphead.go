// Package httphead parses the head of an HTTP/1.x request or response
// from bytes already buffered, into the http.Request or http.Response
// net/http's ReadRequest and ReadResponse would make of them, for the
// shapes a proxy's hot path carries: HTTP/1.0 or 1.1, every line ending
// in CRLF, no folded lines, valid header names and values, a body framed
// by one Content-Length or none. For anything else (or a head not yet
// wholly buffered) it declines, and the caller reads the message with
// net/http, so what a peer may send, and what comes of it, stays
// net/http's (FuzzRequest and FuzzResponse compare the two on random
// heads: whatever is accepted here is what net/http makes of it).
//
// Why: net/http's readers went through a textproto.Reader line by line,
// allocating a string per header value and per line, an io.LimitReader
// and a body per message: about a fifth of the sidecar's user-space CPU
// per proxied request (README "The hop's cost"). Here one string holds
// the whole head, names and values are slices of it, and the caller
// frames the body itself (without an allocation of its own).
package httphead

import (
	"bytes"
	"net/http"
	"strconv"

	"golang.org/x/net/http/httpguts"
)

// head is a message head found in a buffer: its start line and header
// fields, each a slice of one string.
type head struct {
	s      string // the head, up to and including its blank line
	first  string // the start line, without its CRLF
	fields int    // header lines
}

// find looks for a complete head at the start of buf: lines ending in
// CRLF, with no other CR or LF, up to an empty line. It reports the
// head's length, or 0 when there is none (not all buffered, or a line
// this package leaves to net/http).
func find(buf []byte) (n, fields int) {
	for i := 0; ; fields++ {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 1 || buf[i+j-1] != '\r' {
			return 0, 0 // not all here, a bare LF, or an empty first line's LF
		}
		line := buf[i : i+j-1]
		if bytes.IndexByte(line, '\r') >= 0 {
			return 0, 0
		}
		i += j + 1
		if len(line) == 0 {
			if fields == 0 {
				return 0, 0 // no start line
			}
			return i, fields - 1
		}
		if fields > 0 && (line[0] == ' ' || line[0] == '\t') {
			return 0, 0 // a folded line (obs-fold)
		}
	}
}

// parse copies the head of buf[:n] into one string and its fields into
// a header, as textproto.ReadMIMEHeader would, or reports false for a
// field it leaves to net/http.
func parse(buf []byte, n, fields int) (head, http.Header, bool) {
	s := string(buf[:n])
	eol := indexCRLF(s)
	h := head{s: s, first: s[:eol], fields: fields}
	header := make(http.Header, fields)
	strs := make([]string, fields) // values, one slab (as textproto's)
	rest := s[eol+2:]
	for {
		eol := indexCRLF(rest)
		line := rest[:eol]
		rest = rest[eol+2:]
		if line == "" {
			return h, header, true
		}
		colon := indexColon(line)
		if colon <= 0 {
			return head{}, nil, false
		}
		name, value := line[:colon], line[colon+1:]
		for i := 0; i < len(name); i++ {
			if !httpguts.IsTokenRune(rune(name[i])) {
				return head{}, nil, false // a space before the colon included
			}
		}
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
				return head{}, nil, false
			}
		}
		key := canonical(name)
		value = trim(value)
		if vv, ok := header[key]; ok {
			header[key] = append(vv, value)
		} else {
			vv, strs = strs[:1:1], strs[1:]
			vv[0] = value
			header[key] = vv
		}
	}
}

func indexCRLF(s string) int {
	for i := 0; ; i++ {
		if s[i] == '\r' {
			return i
		}
	}
}

func indexColon(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return i
		}
	}
	return -1
}

// trim drops the spaces and tabs around a value (textproto trims the
// line, then the value's start).
func trim(s string) string {
	i, j := 0, len(s)
	for i < j && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for j > i && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	return s[i:j]
}

// canonical is name in textproto's canonical form (http.CanonicalHeaderKey
// of a valid name): name itself, without a copy, when it already is.
func canonical(name string) string {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return http.CanonicalHeaderKey(name)
		}
		upper = c == '-'
	}
	return name
}

// version is ParseHTTPVersion for the two versions this package takes.
func version(proto string) (major, minor int, ok bool) {
	switch proto {
	case "HTTP/1.1":
		return 1, 1, true
	case "HTTP/1.0":
		return 1, 0, true
	}
	return 0, 0, false
}

// contentLength is net/http's framing by Content-Length for a message
// with no Transfer-Encoding: -1 for none, or reports false for anything
// but one valid value.
func contentLength(header http.Header) (int64, bool) {
	cl, ok := header["Content-Length"]
	switch {
	case !ok:
		return -1, true
	case len(cl) != 1:
		return 0, false
	}
	n, err := strconv.ParseUint(cl[0], 10, 63) // empty, signed or spaced: refused
	if err != nil {
		return 0, false
	}
	return int64(n), true
}

// fixPragmaCacheControl is net/http's (RFC 7234, section 5.4).
func fixPragmaCacheControl(header http.Header) {
	if hp, ok := header["Pragma"]; ok && len(hp) > 0 && hp[0] == "no-cache" {
		if _, ok := header["Cache-Control"]; !ok {
			header["Cache-Control"] = []string{"no-cache"}
		}
	}
}

// shouldClose is net/http's: whether the connection closes after this
// message.
func shouldClose(major, minor int, header http.Header, removeCloseHeader bool) bool {
	conv := header["Connection"]
	hasClose := httpguts.HeaderValuesContainsToken(conv, "close")
	if major == 1 && minor == 0 {
		return hasClose || !httpguts.HeaderValuesContainsToken(conv, "keep-alive")
	}
	if hasClose && removeCloseHeader {
		delete(header, "Connection")
	}
	return hasClose
}
