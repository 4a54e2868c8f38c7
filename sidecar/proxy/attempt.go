package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

// The outbound request and the relay of an attempt's response: what
// httputil.ReverseProxy did with Rewrite, done by the exchange itself. The
// request's headers are rewritten once per request, in place (the
// client's request is the exchange's alone, and nothing reads its
// headers after the decision), where ReverseProxy cloned the request,
// its header map and a trace per attempt; the response's headers are
// handed to the client's writer by reference instead of copied value by
// value. The behaviour is ReverseProxy's, rule for rule (the tests of
// package server and attempt_test.go pin it).

// Header values shared by every request; a header map never appends to
// them in place (their length is their capacity).
var (
	teTrailers   = []string{"trailers"}
	noUserAgent  = []string{""} // Request.Write then sends no User-Agent of Go's
	protoHTTP    = []string{"http"}
	protoHTTPS   = []string{"https"}
	connUpgrade  = []string{"Upgrade"}
	errNoUpgrade = errors.New("the backend switched protocols: tether relays no protocol upgrades")
)

// removeHopByHop removes the headers named in Connection, then the
// hop-by-hop ones.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range connectionNames(f) {
			h.Del(name)
		}
	}
	for k := range h {
		if hopByHop(k) {
			delete(h, k)
		}
	}
}

// connectionNames are the names a Connection value lists.
func connectionNames(v string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" && !yield(name) {
				return
			}
		}
	}
}

// upgradeType is the protocol a request or response asks to switch to,
// "" for none.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// badUpgrade refuses a request asking to switch to a protocol whose name
// is not printable.
func badUpgrade(upType string) error {
	return fmt.Errorf("client tried to switch to invalid protocol %q", upType)
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// outbound makes the request sent to backends, once per request: hop-by-
// hop headers removed (and the Te: trailers and upgrade a client asked
// for kept), X-Forwarded-For restored from the request and this hop's
// client (the router) appended to it, as the README says,
// X-Forwarded-Host and -Proto kept when the router sent them (they
// describe the original request) or describing this hop otherwise,
// Forwarded removed, routing headers stripped, query parameters net/url
// cannot parse dropped. target aims it at each attempt's backend.
func (x *exchange) outbound(out *http.Request, body []byte) (*http.Request, error) {
	if x.fieldsIn {
		fields, err := x.outboundFields(x.in)
		if err != nil {
			return nil, err
		}
		x.outFields = fields
	} else if err := x.outboundHeader(); err != nil {
		return nil, err
	}
	x.outURL = *x.in.URL
	x.outURL.RawQuery = cleanQuery(x.outURL.RawQuery)
	out.URL = &x.outURL
	out.Close = false
	if len(body) > 0 {
		out.ContentLength, out.GetBody = int64(len(body)), nil
		if x.pool.bounded == nil {
			out.GetBody = x.rewind // upstream never replays a body
		}
	} else {
		// No body at all (ReverseProxy's too: a transport may then replay
		// the request on a connection that turned out dead).
		out.Body, out.ContentLength, out.GetBody = nil, 0, nil
	}
	return out, nil
}

// outboundHeader is outbound's header rules on the client's Header, in
// place.
func (x *exchange) outboundHeader() error {
	in := x.in
	h := in.Header
	if h == nil {
		h = make(http.Header)
		in.Header = h
	}
	xff, xfh, xfp := h["X-Forwarded-For"], h["X-Forwarded-Host"], h["X-Forwarded-Proto"]
	upType := upgradeType(h)
	if !printable(upType) {
		return badUpgrade(upType)
	}
	trailers := httpguts.HeaderValuesContainsToken(h["Te"], "trailers")
	removeHopByHop(h)
	if trailers {
		h["Te"] = teTrailers
	}
	if upType != "" {
		h["Connection"] = connUpgrade
		h["Upgrade"] = []string{upType}
	}
	delete(h, "Forwarded")
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if len(xff) > 0 {
			ip = strings.Join(xff, ", ") + ", " + ip
		}
		x.xff[0] = ip
		h["X-Forwarded-For"] = x.xff[:]
	} else {
		delete(h, "X-Forwarded-For")
	}
	if len(xfh) == 0 {
		x.xfh[0] = in.Host
		xfh = x.xfh[:]
	}
	h["X-Forwarded-Host"] = xfh
	switch {
	case len(xfp) > 0:
		h["X-Forwarded-Proto"] = xfp
	case in.TLS != nil:
		h["X-Forwarded-Proto"] = protoHTTPS
	default:
		h["X-Forwarded-Proto"] = protoHTTP
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = noUserAgent
	}
	x.h.stripRouting(h)
	return nil
}

// cleanQuery drops what net/url cannot parse from a query (a ';', a bad
// escape), as ReverseProxy does: a backend could read such a query
// differently from the sidecar.
func cleanQuery(q string) string {
	for i := 0; i < len(q); {
		switch q[i] {
		case ';':
			return reencode(q)
		case '%':
			if i+2 >= len(q) || !ishex(q[i+1]) || !ishex(q[i+2]) {
				return reencode(q)
			}
			i += 3
		default:
			i++
		}
	}
	return q
}

func reencode(q string) string {
	v, _ := url.ParseQuery(q)
	return v.Encode()
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// attempt sends out to the current decision's backend and relays the
// response to the client. A round trip that failed leaves its error in
// upErr (forward decides what follows); a body that breaks off
// mid-stream aborts the response (http.ErrAbortHandler), since the client
// has its beginning already.
func (x *exchange) attempt(out *http.Request) {
	if len(x.reqBytes) > 0 {
		x.reqBody.Reset(x.reqBytes)
		// The transport (package upstream) writes the headers and a body
		// that fits its buffer in one syscall, whatever the reader.
		out.Body = &x.reqBody
	}
	target(out, x)
	x.informational.Lock()
	x.roundTripping = true
	x.informational.Unlock()
	resp, err := x.pool.transport.RoundTrip(out)
	x.informational.Lock()
	x.roundTripping = false
	x.informational.Unlock()
	if err != nil {
		x.upErr = err
		return
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		x.answeredOrNot()
		resp.Body.Close()
		x.upErr = errNoUpgrade
		return
	}
	dst := x.Header()
	announced := len(resp.Trailer)
	if fields, ok := x.listed(resp); ok {
		// The backend's fields go to the client as they are listed,
		// less the hop-by-hop ones and those tether's own replace;
		// tether's headers go in the client's map beside them.
		x.respond(resp, dst)
		x.writeHeaderFields(resp.StatusCode, x.forwardable(fields))
	} else {
		removeHopByHop(resp.Header)
		x.respond(resp, resp.Header)
		mergeHeader(dst, resp.Header, "")
		if announced > 0 {
			names := make([]string, 0, announced)
			for k := range resp.Trailer {
				names = append(names, k)
			}
			dst.Add("Trailer", strings.Join(names, ", "))
		}
		x.WriteHeader(resp.StatusCode)
	}
	if err := x.copyBody(resp); err != nil {
		resp.Body.Close()
		if x.in.Context().Value(http.ServerContextKey) == nil {
			return // no server to recover the abort (a handler test's recorder)
		}
		panic(http.ErrAbortHandler)
	}
	resp.Body.Close() // fills resp.Trailer
	if len(resp.Trailer) > 0 {
		x.FlushError() // chunked, whatever the length, so the trailers can follow
	}
	if len(resp.Trailer) == announced {
		mergeHeader(dst, resp.Trailer, "")
	} else {
		mergeHeader(dst, resp.Trailer, http.TrailerPrefix)
	}
}

// listed returns the fields of a response parsed into a list, for a
// client's writer that sends them as they are (fieldsWriter): the
// exchange lent the transport its client connection's heads, Listed.
func (x *exchange) listed(resp *http.Response) ([]httphead.Field, bool) {
	if x.listing == nil {
		return nil, false
	}
	return x.heads.Fields(resp)
}

// forwardable is removeHopByHop for a backend's listed fields, and
// respond's replacing of the session tokens' headers: it drops, in
// place, the hop-by-hop fields, those a Connection field names, and
// those named as a token of the decision.
func (x *exchange) forwardable(fields []httphead.Field) []httphead.Field {
	var named []string // by Connection fields; rare from a backend
	for _, f := range fields {
		if f.Name == "Connection" {
			for name := range connectionNames(f.Value) {
				named = append(named, textproto.CanonicalMIMEHeaderKey(name))
			}
		}
	}
	kept := fields[:0]
	for _, f := range fields {
		if !hopByHop(f.Name) && !slices.Contains(named, f.Name) && !x.replaces(f.Name) {
			kept = append(kept, f)
		}
	}
	clear(fields[len(kept):])
	return kept
}

// hopByHop reports whether a canonical name is a hop-by-hop header's
// (RFC 9110 7.6.1, and RFC 2616's list, which ReverseProxy still
// removes).
func hopByHop(name string) bool {
	switch name {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// replaces reports whether a session token of the decision is sent
// under the canonical name, in place of any value the backend set: its
// name in any case (for a valid name, what Header.Set's canonical key
// matches), compared without making the canonical form.
func (x *exchange) replaces(name string) bool {
	for _, t := range x.d.Tokens {
		if asciiFold(t.Name, name) {
			return true
		}
	}
	return false
}

// fieldsWriter is a client's writer that sends a backend's fields as
// package httphead lists them, before the handler's headers (package
// downstream's response): a proxied response's headers then go through
// no map. The heads an upstream.HeadLender lends are parsed Listed for
// it.
type fieldsWriter interface {
	WriteHeaderFields(code int, fields []httphead.Field)
}

// writeHeaderFields is WriteHeader with a backend's listed fields, sent
// by the client's fieldsWriter.
func (x *exchange) writeHeaderFields(code int, fields []httphead.Field) {
	x.noteStatus(code)
	x.listing.WriteHeaderFields(code, fields)
}

// mergeHeader adds src's values to dst, each name with prefix before it.
// A name dst lacks takes src's slice itself: src (a response's headers or
// trailers) is not used again.
func mergeHeader(dst, src http.Header, prefix string) {
	for k, vv := range src {
		if prefix != "" {
			k = prefix + k
		}
		if old, ok := dst[k]; ok {
			dst[k] = append(old, vv...)
		} else {
			dst[k] = vv
		}
	}
}

// copyBody copies the response body to the client, flushing the headers
// and then every read for a stream (text/event-stream, or a body of
// unknown length) and never before the end otherwise. It returns the
// first write error, or a read error other than the body's end (logged:
// the client's response is cut short).
func (x *exchange) copyBody(resp *http.Response) error {
	flush := resp.ContentLength == -1 || isEventStream(resp.Header.Get("Content-Type"))
	if flush {
		// The headers go at once: a client of a stream may act on them
		// (the status) long before the first token.
		x.FlushError()
	}
	buf := getBuffer()
	defer putBuffer(buf)
	for {
		n, rerr := resp.Body.Read(buf)
		if rerr != nil && rerr != io.EOF && rerr != context.Canceled {
			x.h.o.AccessLog.Warn("reading the backend's response body failed", "request_id", x.requestID, "err", rerr)
		}
		if n > 0 {
			w, werr := x.Write(buf[:n])
			if werr != nil {
				return werr
			}
			if w != n {
				return io.ErrShortWrite
			}
			if flush {
				x.FlushError()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// isEventStream reports whether a Content-Type is text/event-stream, any
// case, parameters ignored.
func isEventStream(ct string) bool { return mediaType(ct) == "text/event-stream" }

// mediaType is a Content-Type without its parameters, lowercase.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// Got1xxResponse relays an informational response (103 Early Hints; 100
// Continue when the backend sends one) to the client, unless the round
// trip has returned: a transport of net/http's may call it from its own
// goroutine (upstream.Observer).
func (x *exchange) Got1xxResponse(code int, header textproto.MIMEHeader) error {
	x.informational.Lock()
	defer x.informational.Unlock()
	if !x.roundTripping {
		return nil
	}
	h := x.Header()
	for k, vv := range header {
		h[k] = append(h[k], vv...)
	}
	x.WriteHeader(code)
	clear(h) // a 1xx response's headers are its own
	return nil
}

// copy buffers, boxed: a sync.Pool keeps pointers, so the boxes go round
// a pool of their own (holders) and neither get nor put allocates once
// warm.
func getBuffer() []byte {
	h, ok := buffers.Get().(*[]byte)
	if !ok {
		return make([]byte, 32<<10)
	}
	b := *h
	*h = nil
	holders.Put(h)
	return b
}

func putBuffer(b []byte) {
	h, _ := holders.Get().(*[]byte)
	if h == nil {
		h = new([]byte)
	}
	*h = b
	buffers.Put(h)
}
