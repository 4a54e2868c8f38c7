package proxy

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Request bodies are read into buffers of a few sizes, the powers of two
// from 512 B to 16 MiB, and every such buffer goes back to a pool of its
// size for the next bodies: the ones readBody outgrows as a body arrives
// (a 256 KiB prompt passes through buffers of 16, 32, 64 and 128 KiB
// before its own) as soon as their bytes are copied into the next, and
// the body's own once the exchange is over (exchange.freeBody). Without
// them a 256 KiB prompt allocated and cleared about 500 KiB per request
// only to drop it and collect it.
//
// Lending the body's own buffer again is safe only once nothing reads it:
// the access log, the resolver and the Responses API copy what they keep
// of it (reqbody's values are strings of their own), and package
// upstream's transport has written it, or given up, when its round trip
// returns. A transport of net/http's may read a body after its round trip
// (until it closes it), so a body an exchange handed to one is left to the
// collector (exchange.bodyLent).
const (
	minBodyShift = 9                     // 512 B
	bodyClasses  = 24 - minBodyShift + 1 // 512 B … 16 MiB
)

// bodyBuffers holds, per class, the first byte of free buffers of that
// class's size: a pointer, which an interface holds without an
// allocation (a *[]byte would need one per Put).
var bodyBuffers [bodyClasses]sync.Pool // of *byte

// bodyClass is the smallest class whose buffers hold n bytes, -1 when n
// is over the largest.
func bodyClass(n int) int {
	if n <= 1<<minBodyShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - minBodyShift
	if c >= bodyClasses {
		return -1
	}
	return c
}

func classSize(c int) int { return 1 << (minBodyShift + c) }

// bodyBuffer is an empty buffer of capacity at least n: a class's size,
// lent again when its pool has one.
func bodyBuffer(n int) []byte {
	c := bodyClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if b, ok := pooledOfClass(c); ok {
		return b
	}
	return make([]byte, 0, classSize(c))
}

// pooledBodyBuffer is an empty buffer of capacity at least n that a pool
// holds, if one does: memory the process has already, idle.
func pooledBodyBuffer(n int) ([]byte, bool) {
	if c := bodyClass(n); c >= 0 {
		return pooledOfClass(c)
	}
	return nil, false
}

func pooledOfClass(c int) ([]byte, bool) {
	if p, ok := bodyBuffers[c].Get().(*byte); ok {
		return unsafe.Slice(p, classSize(c))[:0], true
	}
	return nil, false
}

// freeBodyBuffer keeps b for a later body when its capacity is a class's
// size (bodyBuffer made it). Its caller holds b no more, nor does anyone
// it lent b to.
func freeBodyBuffer(b []byte) {
	if c := bodyClass(cap(b)); c >= 0 && cap(b) == classSize(c) {
		bodyBuffers[c].Put(unsafe.SliceData(b[:cap(b)]))
	}
}
