package upstream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

// writeRequest writes req as Request.Write writes it, byte for byte
// (FuzzWriteRequest compares the two), for the requests a proxy sends: a
// body of known length or none, no trailers, no chunking, an ASCII host
// without a zone. It reports false, having written nothing, for any
// other request, which Request.Write then writes. What it saves is
// Request.Write's formatting through fmt, its transfer writer and its
// header sorter: a few percent of the sidecar's CPU per request.
//
// With listed, the header fields written are fields, as they stand and
// in their order (FieldLister), not req.Header: the same request but for
// the order of its fields (FuzzWriteRequestFields).
func writeRequest(bw *bufio.Writer, req *http.Request, trace *httptrace.ClientTrace, fields []httphead.Field, listed bool) (handled bool, err error) {
	if !fastWritable(req, trace) {
		return false, nil
	}
	if trace != nil && trace.WroteRequest != nil {
		defer func() { trace.WroteRequest(httptrace.WroteRequestInfo{Err: err}) }()
	}
	if req.Body != nil {
		defer func() {
			if cerr := req.Body.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	host := requestHost(req)
	if !httpguts.ValidHostHeader(host) {
		host = "" // as Request.Write: an invalid Host is sent empty
	}
	uri := req.URL.RequestURI()
	if hasCTL(uri) {
		return true, errors.New("net/http: can't write control character in Request.URL")
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	if !listed {
		ua := "Go-http-client/1.1"
		if _, ok := req.Header["User-Agent"]; ok {
			ua = req.Header.Get("User-Agent")
		}
		if ua != "" {
			bw.WriteString("User-Agent: ")
			writeValue(bw, ua)
			bw.WriteString("\r\n")
		}
	}
	if sendsContentLength(req) {
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), req.ContentLength, 10))
		bw.WriteString("\r\n")
	}
	if listed {
		writeFields(bw, fields)
	} else {
		writeHeaders(bw, req.Header)
	}
	bw.WriteString("\r\n")
	if req.ContentLength > 0 {
		return true, writeBody(bw, req.Body, req.ContentLength)
	}
	return true, nil
}

// fastWritable: what writeRequest writes as Request.Write does.
func fastWritable(req *http.Request, trace *httptrace.ClientTrace) bool {
	if req.URL == nil {
		return false
	}
	host := requestHost(req)
	return req.URL.Opaque == "" && req.Method != "" && req.Method != "CONNECT" &&
		len(req.TransferEncoding) == 0 && req.Trailer == nil && !req.Close &&
		(req.ContentLength > 0 && req.Body != nil || req.ContentLength == 0 && req.Body == nil) &&
		isASCII(host) && !strings.HasPrefix(host, "[") &&
		(trace == nil || trace.WroteHeaderField == nil && trace.WroteHeaders == nil && trace.Wait100Continue == nil)
}

// requestHost is the host a request names: its Host, else its URL's.
func requestHost(req *http.Request) string {
	if req.Host != "" {
		return req.Host
	}
	return req.URL.Host
}

// sendsContentLength is net/http's rule (with no Transfer-Encoding): a
// body's length always, and 0 for POST, PUT and PATCH, which many
// servers expect it for.
func sendsContentLength(req *http.Request) bool {
	switch {
	case req.ContentLength > 0:
		return true
	case req.Method == "POST" || req.Method == "PUT" || req.Method == "PATCH":
		return true
	}
	return false
}

// excluded are the headers Request.Write writes itself, or never.
func excluded(k string) bool {
	switch k {
	case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// headerKeys are sorting buffers for writeHeaders.
var headerKeys = sync.Pool{New: func() any { s := make([]string, 0, 32); return &s }}

// writeHeaders writes h sorted by name, as Header.Write does: invalid
// names dropped, each value's line breaks made spaces and its ends
// trimmed.
func writeHeaders(bw *bufio.Writer, h http.Header) {
	kp := headerKeys.Get().(*[]string)
	keys := (*kp)[:0]
	for k := range h {
		if !excluded(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			writeValue(bw, v)
			bw.WriteString("\r\n")
		}
	}
	clear(keys)
	*kp = keys[:0]
	headerKeys.Put(kp)
}

// writeFields writes fields as they stand, but for those the request
// line's framing writes itself or never (excluded), User-Agent written.
func writeFields(bw *bufio.Writer, fields []httphead.Field) {
	for _, f := range fields {
		if f.Name != "User-Agent" && excluded(f.Name) {
			continue
		}
		bw.WriteString(f.Name)
		bw.WriteString(": ")
		bw.WriteString(f.Value)
		bw.WriteString("\r\n")
	}
}

// headerOf is fields as a Header for Request.Write: with an empty
// User-Agent when they have none, so that it sends none either (not
// Go's), as writeFields would.
func headerOf(fields []httphead.Field) http.Header {
	h := httphead.HeaderOf(fields)
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""}
	}
	return h
}

// writeValue writes v with CR and LF made spaces, then trimmed of
// spaces and tabs (Request.Write's headerNewlineToSpace and TrimString),
// which leave a plain value as it is.
func writeValue(bw *bufio.Writer, v string) {
	if !httphead.PlainValue(v) {
		v = textproto.TrimString(newlineToSpace.Replace(v))
	}
	bw.WriteString(v)
}

// newlineToSpace replaces bytes, not runes: a value that is not UTF-8
// passes unchanged (it allocates only when it replaces).
var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// heldBody is a body held whole in memory (the proxy's, which it read
// before choosing a backend: a bytes.Reader).
type heldBody interface {
	Len() int
	io.WriterTo
}

// writeBody copies exactly n bytes of body through bw's own buffer; a
// body shorter or longer than n fails as it does in Request.Write. A body
// held whole goes to bw in one Write, which bufio passes on as one write
// of all but what fills its buffer: a prompt of 256 KiB in two writes to
// the socket, not 64 of bw's 4 KiB.
func writeBody(bw *bufio.Writer, body io.Reader, n int64) error {
	if h, ok := body.(heldBody); ok && int64(h.Len()) == n {
		_, err := h.WriteTo(bw)
		return err
	}
	var copied int64
	for copied < n {
		if bw.Available() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		buf := bw.AvailableBuffer()
		buf = buf[:min(int64(cap(buf)), n-copied)]
		m, err := body.Read(buf)
		bw.Write(buf[:m])
		copied += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if copied == n {
		// Request.Write reads on to find a longer body.
		extra, err := io.Copy(io.Discard, body)
		copied += extra
		if err != nil {
			return err
		}
	}
	if copied != n {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", n, copied)
	}
	return nil
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
