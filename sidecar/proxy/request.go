package proxy

import (
	"math/rand/v2"
	"unsafe"
)

// What the proxy reads from a request for its own use: the request id and
// trace context the access log carries.

// RequestIDHeader carries a request's id: passed through when the client
// (the router) sent a usable one, generated and forwarded otherwise, so
// the backend's logs and the access log name the same id.
const RequestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds a client's request id (UUIDs are 36 characters,
// other schemes rarely reach 64); a longer one is replaced.
const maxRequestIDLen = 128

// identify reads (or gives) the request its id and reads its W3C trace
// context.
func (x *exchange) identify() {
	id := x.clientField(RequestIDHeader)
	if !validRequestID(id) {
		id = NewRequestID(&x.idBytes)
		x.setRequestID(id)
	}
	x.requestID = id
	if tp := x.clientField("Traceparent"); validTraceparent(tp) {
		x.traceparent = tp
	}
}

// validRequestID accepts 1 to maxRequestIDLen visible ASCII characters.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// NewRequestID writes a random UUID (version 4), as Envoy and nginx's
// $request_id users expect, in s and returns it as a string of s's bytes
// (not a copy: the string is s's for as long as it is referenced, so s
// must not be written again; the exchange's array is written once). An
// id needs to be unique, not secret: the runtime's per-thread ChaCha8
// generator is enough and never blocks.
func NewRequestID(s *[36]byte) string {
	var u [16]byte
	hi, lo := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		u[i], u[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	const hexdigits = "0123456789abcdef"
	j := 0
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hexdigits[b>>4], hexdigits[b&0x0f]
		j += 2
	}
	return unsafe.String(&s[0], len(s))
}

// maxTraceparentLen bounds a traceparent the log repeats (version 00 is
// 55 characters; later versions may append fields).
const maxTraceparentLen = 256

// validTraceparent accepts a W3C traceparent: version-traceid-parentid-
// flags in lowercase hex (2-32-16-2), and for versions after 00 anything
// after a further dash. Anything else is not logged.
func validTraceparent(tp string) bool {
	if len(tp) < 55 || len(tp) > maxTraceparentLen || (len(tp) > 55 && (tp[:2] == "00" || tp[55] != '-')) {
		return false
	}
	for i := 0; i < 55; i++ {
		c := tp[i]
		switch i {
		case 2, 35, 52:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	// All-zero ids and version ff are invalid.
	return tp[:2] != "ff" && tp[3:35] != zeros[:32] && tp[36:52] != zeros[:16]
}

const zeros = "00000000000000000000000000000000"
