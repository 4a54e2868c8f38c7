package downstream

import (
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

// pendingMax is how much of a body of unknown length is held before its
// framing is chosen: a response that ends within it is sent with a
// Content-Length, a longer one is chunked (net/http's figure).
const pendingMax = 2048

// response is the http.ResponseWriter of one request (and an
// http.Flusher, and a target for http.ResponseController's deadlines).
//
// WriteHeader puts the status line and the handler's headers in the
// connection's buffer at once, so a header changed later (ReverseProxy
// sets trailers in the same map) cannot leak into them, without a copy
// of the map. The framing headers (Content-Length, Transfer-Encoding,
// Connection, Date) and the blank line follow once the framing is
// known: at the first write of a body of known length, a flush, a body
// past pendingMax, or the handler's return.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header // the handler's; one map per connection, cleared as its request ends (conn.forget)

	status int  // the final status; 0 until WriteHeader(>= 200)
	framed bool // framing headers and the blank line written
	// From the headers at WriteHeader:
	length       int64 // Content-Length, -1 when unknown
	bodyAllowed  bool
	isHEAD       bool
	sniff        bool     // no Content-Type: detect one from the body
	hasDate      bool     // the handler set Date
	saidClose    bool     // the handler set "Connection: close"
	trailerNames []string // announced in Trailer

	chunked bool
	written int64  // body bytes accepted from the handler
	pending []byte // body held before framing; reused
	// closeAfter: the connection carries no other request.
	closeAfter bool
	// err is the first failed write to the client; later writes return it.
	err  error
	done bool // the handler has returned
	// scratch for a chunk's size line and the Date header.
	scratch [64]byte
}

var errAfterHandler = errors.New("downstream: write after the handler returned")

func (w *response) reset(c *conn, req *http.Request) {
	*w = response{c: c, req: req, header: w.header, length: -1, pending: w.pending[:0],
		isHEAD: req.Method == http.MethodHead, closeAfter: req.Close}
}

// Header is the map of headers to send, as WriteHeader finds it.
func (w *response) Header() http.Header { return w.header }

// WriteHeader sends an informational (1xx) response at once, or records
// the final status and puts its headers in the buffer. A second final
// status is ignored, as net/http does.
func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("downstream: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.done || w.status != 0 {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeStatusLine(code)
		w.writeHeaders()
		w.c.writer().WriteString("\r\n")
		w.flush()
		return
	}
	w.status = code
	w.bodyAllowed = code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
	if cl := w.header.Get("Content-Length"); cl != "" && w.bodyAllowed {
		if n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64); err == nil && n >= 0 {
			w.length = n
		} else {
			w.header.Del("Content-Length") // not a length: frame the body instead
		}
	}
	if !w.bodyAllowed {
		w.header.Del("Content-Length")
	}
	w.noteHeaders(nil)
	w.writeStatusLine(code)
	w.writeHeaders()
}

// WriteHeaderFields is WriteHeader(code) for the handler's headers
// added to fields: fields are sent first, in their order, then the
// handler's (a name in both has the fields' values first). For a
// proxy's backend's fields as package httphead lists them, forwarded
// without a map of their own.
func (w *response) WriteHeaderFields(code int, fields []httphead.Field) {
	if w.done || w.status != 0 {
		return // as WriteHeader: a second final status is ignored
	}
	length, ok := fieldsLength(fields)
	if !ok || code < 200 || code > 999 || code == http.StatusNoContent || code == http.StatusNotModified ||
		w.header["Content-Length"] != nil {
		// WriteHeader decides the rest (the framing a status or a
		// length of the handler's allows), on the fields put in the map.
		prependFields(w.header, fields)
		w.WriteHeader(code)
		return
	}
	w.status, w.bodyAllowed, w.length = code, true, length
	w.noteHeaders(fields)
	w.writeStatusLine(code)
	for _, f := range fields {
		if !skipHeader(f.Name) && !w.isTrailer(f.Name) {
			w.writeLine(f.Name, f.Value)
		}
	}
	w.writeHeaders()
}

// prependFields puts fields in h, in their order, before the values h
// holds under the same names.
func prependFields(h http.Header, fields []httphead.Field) {
	for i := len(fields) - 1; i >= 0; i-- {
		f := fields[i]
		h[f.Name] = append([]string{f.Value}, h[f.Name]...)
	}
}

// fieldsLength is the body length fields give, -1 for none; false for
// more than one Content-Length or one that is not a length.
func fieldsLength(fields []httphead.Field) (length int64, ok bool) {
	length = -1
	for _, f := range fields {
		if f.Name != "Content-Length" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(f.Value), 10, 64)
		if length >= 0 || err != nil || n < 0 {
			return 0, false
		}
		length = n
	}
	return length, true
}

// noteHeaders notes what the framing reads of the headers to send:
// fields, then the handler's.
func (w *response) noteHeaders(fields []httphead.Field) {
	var hasType, encoded bool
	var encoding string
	for _, f := range fields {
		switch f.Name {
		case "Content-Type":
			hasType = true
		case "Date":
			w.hasDate = true
		case "Content-Encoding":
			if !encoded {
				encoding, encoded = f.Value, true // the first value, as Get's
			}
		case "Connection":
			w.saidClose = w.saidClose || httpguts.HeaderValuesContainsToken([]string{f.Value}, "close")
		case "Trailer":
			w.noteTrailers(f.Value)
		}
	}
	if len(w.header) > 0 { // a proxied response's are the backend's fields, mostly
		_, typed := w.header["Content-Type"]
		_, dated := w.header["Date"]
		hasType, w.hasDate = hasType || typed, w.hasDate || dated
		if vv := w.header["Content-Encoding"]; !encoded && len(vv) > 0 {
			encoding = vv[0] // Get's
		}
		w.saidClose = w.saidClose || httpguts.HeaderValuesContainsToken(w.header["Connection"], "close")
		for _, v := range w.header["Trailer"] {
			w.noteTrailers(v)
		}
	}
	w.sniff = !hasType && w.bodyAllowed && encoding == ""
	w.closeAfter = w.closeAfter || w.saidClose
}

// noteTrailers adds the names a Trailer value announces.
func (w *response) noteTrailers(v string) {
	for name := range strings.SplitSeq(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			w.trailerNames = append(w.trailerNames, textproto.CanonicalMIMEHeaderKey(name))
		}
	}
}

// writeContinue answers a client that asked for 100 Continue, unless the
// final response has begun.
func (w *response) writeContinue() {
	if w.status != 0 || w.done {
		return
	}
	w.c.writer().WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	w.flush()
}

func (w *response) writeStatusLine(code int) {
	bw := w.c.writer()
	if code == http.StatusOK && w.req.ProtoAtLeast(1, 1) {
		bw.WriteString("HTTP/1.1 200 OK\r\n") // most
		return
	}
	if w.req.ProtoAtLeast(1, 1) {
		bw.WriteString("HTTP/1.1 ")
	} else {
		bw.WriteString("HTTP/1.0 ")
	}
	bw.Write(strconv.AppendInt(w.scratch[:0], int64(code), 10))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.Write(strconv.AppendInt(w.scratch[:0], int64(code), 10))
	}
	bw.WriteString("\r\n")
}

// writeHeaders writes the handler's headers but those the framing
// decides, trailers, and names that are not valid (as net/http drops
// them); a line break in a value becomes a space.
func (w *response) writeHeaders() {
	for k, vv := range w.header {
		if !skipHeader(k) && !w.isTrailer(k) {
			w.writeField(k, vv)
		}
	}
}

// skipHeader: the framing's own headers, and trailers set under
// http.TrailerPrefix.
func skipHeader(k string) bool {
	return k == "Transfer-Encoding" || strings.HasPrefix(k, http.TrailerPrefix)
}

func (w *response) isTrailer(k string) bool {
	for _, t := range w.trailerNames {
		if t == k {
			return true
		}
	}
	return false
}

// lineBreaksToSpaces works byte by byte: a value that is not UTF-8 keeps
// its other bytes.
var lineBreaksToSpaces = strings.NewReplacer("\r", " ", "\n", " ")

// writeField writes a header or trailer field, one line per value,
// unless its name is not valid (net/http drops those too); a line break
// in a value becomes a space.
func (w *response) writeField(name string, vv []string) {
	for _, v := range vv {
		w.writeLine(name, v)
	}
}

// writeLine is writeField of one value.
func (w *response) writeLine(name, v string) {
	if !httpguts.ValidHeaderFieldName(name) {
		return
	}
	bw := w.c.writer()
	bw.WriteString(name)
	bw.WriteString(": ")
	if !httphead.PlainValue(v) {
		v = strings.Trim(v, " \t")
		if strings.ContainsAny(v, "\r\n") {
			v = lineBreaksToSpaces.Replace(v)
		}
	}
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

// Write sends body bytes, framing the response first if it is not yet.
func (w *response) Write(p []byte) (int, error) {
	if w.done {
		return 0, errAfterHandler
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.bodyAllowed {
		if w.isHEAD {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	if !w.framed {
		if w.length < 0 && len(w.pending)+len(p) <= pendingMax {
			w.pending = append(w.pending, p...)
			w.written += int64(len(p))
			return len(p), nil
		}
		w.frame(p)
	}
	n, err := w.writeBody(p)
	w.written += int64(n)
	return n, err
}

// frame writes the framing headers and the blank line, then the body
// held so far. first is the body's first bytes when none is held (for
// Content-Type detection).
func (w *response) frame(first []byte) {
	w.framed = true
	bw := w.c.writer()
	if w.sniff {
		data := w.pending
		if len(data) == 0 {
			data = first
		}
		if len(data) > 0 {
			bw.WriteString("Content-Type: ")
			bw.WriteString(http.DetectContentType(data))
			bw.WriteString("\r\n")
		}
	}
	if !w.c.body.eof && (w.closeAfter || !w.done || !w.c.body.drain()) {
		// The rest of the request body is unread (and, before the
		// handler's return, may still be read): the next request cannot
		// be found on this connection.
		w.closeAfter = true
	}
	if w.c.s.closing.Load() {
		w.closeAfter = true
	}
	trailers := len(w.trailerNames) > 0 || w.hasPrefixedTrailers()
	switch {
	case !w.bodyAllowed || w.length >= 0:
	case w.done && !trailers:
		// The whole body is held: its length (for HEAD, the length a GET
		// would have been sent with).
		w.length = int64(len(w.pending))
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(w.scratch[:0], w.length, 10))
		bw.WriteString("\r\n")
	case w.isHEAD:
		// Longer than pendingMax: no length and no framing.
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	default:
		w.closeAfter = true // close-delimited
	}
	switch {
	case w.closeAfter && !w.saidClose && w.req.ProtoAtLeast(1, 1):
		// (An HTTP/1.0 connection closes unless it says keep-alive.)
		bw.WriteString("Connection: close\r\n")
	case !w.closeAfter && !w.req.ProtoAtLeast(1, 1):
		bw.WriteString("Connection: keep-alive\r\n")
	}
	if !w.hasDate {
		bw.WriteString("Date: ")
		bw.Write(time.Now().UTC().AppendFormat(w.scratch[:0], http.TimeFormat))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	if len(w.pending) > 0 {
		_, _ = w.writeBody(w.pending)
		w.pending = w.pending[:0]
	}
}

func (w *response) hasPrefixedTrailers() bool {
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// writeBody puts p on the wire in the response's framing.
func (w *response) writeBody(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.isHEAD {
		return len(p), nil // a response to HEAD has no body
	}
	bw := w.c.writer()
	if w.chunked {
		bw.Write(strconv.AppendUint(w.scratch[:0], uint64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.noteErr(err)
	return n, err
}

func (w *response) noteErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
		w.closeAfter = true
	}
}

// FlushError sends what is buffered to the client (choosing chunked
// framing for a body of unknown length).
func (w *response) FlushError() error {
	if w.done {
		return errAfterHandler
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.framed {
		w.frame(nil)
	}
	if w.err != nil {
		return w.err
	}
	return w.flush()
}

// flush sends what the connection's writer holds and gives the writer
// back: between a stream's events the response holds no buffer.
func (w *response) flush() error {
	if w.c.bw == nil {
		return w.err // nothing written since the last flush
	}
	err := w.c.bw.Flush()
	w.noteErr(err)
	if err == nil {
		w.c.giveBackWriter()
	}
	return err
}

// ResponseHeads lends a proxying handler where to parse its backend's
// response head (upstream.HeadLender): the connection's, used by one
// request at a time, valid until the handler returns.
func (w *response) ResponseHeads() *httphead.Responses { return &w.c.backendHeads }

// RequestFields returns the header fields of req in the order they came,
// and true, when the server lists requests (ListRequests) and req, the
// request in progress, was read so; its Header is then empty. The
// handler may edit the list in place and append to it (it has room for
// a few more fields); valid until the handler returns.
func (w *response) RequestFields(req *http.Request) ([]httphead.Field, bool) {
	return w.c.heads.Fields(req)
}

// Flush is FlushError for http.Flusher.
func (w *response) Flush() { _ = w.FlushError() }

// SetReadDeadline and SetWriteDeadline set the connection's deadlines
// for http.ResponseController (the proxy's body-read idle timeout).
func (w *response) SetReadDeadline(t time.Time) error { return w.c.setReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error {
	w.c.out.idle.Forget() // the idle bound, if any, moves it again from the next write
	return w.c.nc.SetWriteDeadline(t)
}

// finish completes the response after the handler returned: the framing
// if not yet, the last chunk and trailers, and a flush.
func (w *response) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.done = true
	if !w.framed {
		w.frame(nil)
	}
	if w.chunked && w.err == nil {
		bw := w.c.writer() // a stream's last flush gave its writer back
		bw.WriteString("0\r\n")
		for _, k := range w.trailerNames {
			w.writeField(k, w.header[k])
		}
		for k, vv := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				w.writeField(name, vv)
			}
		}
		bw.WriteString("\r\n")
	}
	w.flush()
	if w.length >= 0 && w.bodyAllowed && !w.isHEAD && w.written != w.length {
		w.closeAfter = true // short of its Content-Length: the client waits for the rest
	}
}

// reusable reports whether the connection can carry the next request.
func (w *response) reusable() bool {
	return !w.closeAfter && w.err == nil && !w.c.watch.clientGone()
}
