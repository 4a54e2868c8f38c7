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
// and a body per message: about a quarter of the sidecar's user-space CPU
// per proxied request (README "The hop's cost"). Here one string holds
// the whole head, names and values are slices of it, and the caller
// frames the body itself (without an allocation of its own).
package httphead

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"
)

// head is a parsed message head: its start line, its header, and what
// framing reads of it, noted as the fields went by (a map lookup each,
// otherwise).
type head struct {
	first  string // the start line, without its CRLF; a slice of the head's one string
	header http.Header
	// list, when the head was parsed into a list (room.list): every field
	// is there, in order, and header holds only the Content-Type's (a
	// response's) or nothing (a request's).
	list *[]Field

	te            bool   // a Transfer-Encoding field
	hosts         int    // Host fields
	host          string // the first's value
	lengths       int    // Content-Length fields
	length        string // the first's value
	pragma        bool   // a Pragma field
	pragmaNoCache bool   // the first one's value is no-cache
	cacheControl  bool   // a Cache-Control field
	connection    bool   // a Connection field
}

// maxFields is the most header fields a head parsed here has; one with
// more goes to net/http.
const maxFields = 32

// spare is the room a list keeps for fields its reader adds (a proxy's
// X-Forwarded-* and request id), so that adding them allocates nothing.
const spare = 8

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

// Complete reports whether buf starts with a whole head of the shape
// this package parses (lines ending in CRLF, none folded), so that
// reading it needs no read of the connection.
func Complete(buf []byte) bool {
	n, _ := find(buf)
	return n > 0
}

// Field is one header field as net/http's Header holds it: the name in
// canonical form, the value trimmed of spaces and tabs.
type Field struct{ Name, Value string }

// room is where parse puts a head's fields: a header map and the slab
// its values' slices are cut from, or a list of them. Kept by a
// connection (Requests, Responses), they serve its next message too,
// cleared: three allocations a message spared (the map, its group, the
// slab).
type room struct {
	header http.Header
	values []string
	list   []Field
}

// forget drops what r's last message left in them, keeping their room.
func (r *room) forget() {
	clear(r.header)
	clear(r.values[:cap(r.values)])
	clear(r.list[:cap(r.list)])
	r.list = r.list[:0]
}

// used reports whether r holds a message not forgotten since.
func (r *room) used() bool { return len(r.header) > 0 || len(r.list) > 0 }

// parse copies the head of buf[:n] into one string and its fields into
// a header, as textproto.ReadMIMEHeader would, or reports false for a
// field it leaves to net/http. With dropHost the Host fields are noted
// but left out of the header (ReadRequest deletes them). The header is
// keep's map and slab when keep is not nil (the message before's
// cleared), new ones otherwise. With list (and keep), the fields go into
// keep's list in the order they came instead, and the header holds only
// the Content-Type's values, or none with dropHost (a request's, which
// nothing reads by the map).
func parse(buf []byte, n, fields int, dropHost bool, keep *room, list bool) (h head, ok bool) {
	if fields > maxFields {
		return head{}, false
	}
	s := string(buf[:n])
	eol := indexCRLF(s)
	h.first = s[:eol]
	rest := s[eol+2:]
	var kv [maxFields]Field
	nkv := 0
	for {
		eol := indexCRLF(rest)
		line := rest[:eol]
		rest = rest[eol+2:]
		if line == "" {
			break
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 || !validName(line[:colon]) || !validValue(line[colon+1:]) {
			return head{}, false // a space before the colon included
		}
		key, value := canonical(line[:colon]), trim(line[colon+1:])
		switch key {
		case "Host":
			if h.hosts++; h.hosts == 1 {
				h.host = value
			}
			if dropHost {
				continue
			}
		case "Content-Length":
			if h.lengths++; h.lengths == 1 {
				h.length = value
			}
		case "Transfer-Encoding":
			h.te = true
		case "Pragma":
			if !h.pragma {
				h.pragma, h.pragmaNoCache = true, value == "no-cache"
			}
		case "Cache-Control":
			h.cacheControl = true
		case "Connection":
			h.connection = true
		}
		kv[nkv] = Field{key, value}
		nkv++
	}
	if list {
		h.list = &keep.list
		h.header = keep.listed(kv[:nkv], !dropHost)
		return h, true
	}
	// Each name hashed once: a repeated name (rare) is found among those
	// before it, not by a lookup per field.
	var strs []string // values, one slab (as textproto's)
	switch {
	case keep == nil:
		h.header, strs = make(http.Header, nkv), make([]string, nkv)
	default:
		if keep.header == nil {
			keep.header = make(http.Header, nkv)
		}
		if cap(keep.values) < nkv {
			keep.values = make([]string, nkv)
		}
		if keep.used() { // not forgotten since
			keep.forget()
		}
		h.header, strs = keep.header, keep.values[:nkv]
	}
	for i := 0; i < nkv; i++ {
		if seen(kv[:i], kv[i].Name) {
			continue
		}
		vv := strs[:1:1]
		strs = strs[1:]
		vv[0] = kv[i].Value
		for j := i + 1; j < nkv; j++ {
			if kv[j].Name == kv[i].Name {
				vv = append(vv, kv[j].Value)
			}
		}
		h.header[kv[i].Name] = vv
	}
	return h, true
}

// listed keeps kv as r's list (the message before's cleared) and
// returns r's header with only kv's Content-Type values in it, or
// nothing without types. The list keeps room for spare fields more.
func (r *room) listed(kv []Field, types bool) http.Header {
	if r.used() {
		r.forget()
	}
	if r.header == nil {
		r.header = make(http.Header, 1)
	}
	if cap(r.list) < len(kv)+spare {
		r.list = make([]Field, 0, len(kv)+spare)
	}
	r.list = append(r.list, kv...)
	if !types {
		return r.header
	}
	ntypes := 0
	for _, f := range kv {
		if f.Name == "Content-Type" {
			ntypes++
		}
	}
	if ntypes > 0 {
		if cap(r.values) < ntypes {
			r.values = make([]string, ntypes)
		}
		vv := r.values[:0:ntypes]
		for _, f := range kv {
			if f.Name == "Content-Type" {
				vv = append(vv, f.Value)
			}
		}
		r.header["Content-Type"] = vv
	}
	return r.header
}

// seen reports whether name is among kv's names.
func seen(kv []Field, name string) bool {
	for _, f := range kv {
		if f.Name == name {
			return true
		}
	}
	return false
}

func indexCRLF(s string) int {
	for i := 0; ; i++ {
		if s[i] == '\r' {
			return i
		}
	}
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

// PlainValue reports whether a field's value is written as it is: no
// space or tab at its ends and no line break in it, as most values are.
// net/http's writers trim a value's ends and make its line breaks
// spaces, which leaves such a value unchanged, so a writer of heads
// (downstream's responses, upstream's requests) skips both for it: each
// walks or builds a set of bytes on every call.
func PlainValue(v string) bool {
	if v != "" && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			return false
		}
	}
	return true
}

// canonical is name in textproto's canonical form (http.CanonicalHeaderKey
// of a valid name): name itself, without a copy, when it already is; from
// the cache of names seen in other forms (clients that send x-session-id
// or X-Session-ID send it on every request), or made anew.
func canonical(name string) string {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return recanonical(name)
		}
		upper = c == '-'
	}
	return name
}

// recanonical is canonical for a name not in canonical form: cached,
// in a map replaced whole on each addition (readers take no lock), of at
// most maxCached names of at most maxCachedLen bytes, so that a client
// inventing names fills it once and grows it no further.
func recanonical(name string) string {
	if m := cache.Load(); m != nil {
		if c, ok := (*m)[name]; ok {
			return c
		}
	}
	c := http.CanonicalHeaderKey(name)
	if len(name) > maxCachedLen {
		return c
	}
	cacheMu.Lock()
	defer cacheMu.Unlock()
	old := cache.Load()
	if old != nil && len(*old) >= maxCached {
		return c
	}
	m := make(map[string]string, 1+mapLen(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[strings.Clone(name)] = c // not a slice of a head: it would keep the head
	cache.Store(&m)
	return c
}

func mapLen(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

const (
	maxCached    = 256
	maxCachedLen = 64
)

var (
	cache   atomic.Pointer[map[string]string]
	cacheMu sync.Mutex
)

// validName reports whether name is a token (textproto's and httpguts'
// rule for a field name; a space is not one).
func validName(name string) bool {
	for i := 0; i < len(name); i++ {
		if !tokenByte[name[i]] {
			return false
		}
	}
	return true
}

// validValue reports whether a field value has only bytes textproto
// takes: no control byte but HTAB (obs-text included).
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if badValueByte[v[i]] {
			return false
		}
	}
	return true
}

var tokenByte, badValueByte [256]bool

func init() {
	for c := range 256 {
		tokenByte[c] = httpguts.IsTokenRune(rune(c))
		badValueByte[c] = c < ' ' && c != '\t' || c == 0x7f
	}
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
func (h *head) contentLength() (int64, bool) {
	switch h.lengths {
	case 0:
		return -1, true
	case 1:
	default:
		return 0, false
	}
	n, err := strconv.ParseUint(h.length, 10, 63) // empty, signed or spaced: refused
	if err != nil {
		return 0, false
	}
	return int64(n), true
}

// fixPragmaCacheControl is net/http's (RFC 7234, section 5.4).
func (h *head) fixPragmaCacheControl() {
	if h.pragmaNoCache && !h.cacheControl {
		if h.list != nil {
			*h.list = append(*h.list, Field{"Cache-Control", "no-cache"})
			return
		}
		h.header["Cache-Control"] = []string{"no-cache"}
	}
}

// shouldClose is net/http's: whether the connection closes after this
// message.
func (h *head) shouldClose(major, minor int, removeCloseHeader bool) bool {
	hasClose := h.connectionHas("close")
	if major == 1 && minor == 0 {
		return hasClose || !h.connectionHas("keep-alive")
	}
	if hasClose && removeCloseHeader {
		if h.list != nil {
			*h.list = slices.DeleteFunc(*h.list, func(f Field) bool { return f.Name == "Connection" })
		} else {
			delete(h.header, "Connection")
		}
	}
	return hasClose
}

// connectionHas reports whether the Connection fields name token.
func (h *head) connectionHas(token string) bool {
	switch {
	case !h.connection:
		return false
	case h.list == nil:
		return httpguts.HeaderValuesContainsToken(h.header["Connection"], token)
	}
	for _, f := range *h.list {
		if f.Name == "Connection" && httpguts.HeaderValuesContainsToken([]string{f.Value}, token) {
			return true
		}
	}
	return false
}
