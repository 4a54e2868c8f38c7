package proxy

import (
	"math/bits"
	"sync"
)

// The buffers readBody outgrows. A body of unknown or large size is read
// into a buffer of firstBodyBuffer that at most doubles as bytes arrive
// (readBody), so a 256 KiB prompt passes through buffers of 16, 32, 64
// and 128 KiB before its own: about 240 KiB allocated and cleared per
// request only to be dropped, and collected. Those buffers are kept
// here, one pool per size, for the next bodies to grow through.
//
// Only readBody puts and takes them, and that is what makes lending them
// safe: a buffer is put only once readBody has copied its bytes into the
// larger one and holds it no more (a reader does not keep the slice it
// reads into); a buffer taken may become a request's body, which lives
// as long as the request holds it and is never put back. Request bodies
// themselves are not pooled: their bytes may be read after the request
// (a transport of net/http's reads a body until it closes it).
const bodyClasses = 11 // firstBodyBuffer << 0 … << 10: 16 KiB … 16 MiB

var outgrownBuffers [bodyClasses]sync.Pool // of *[]byte

// bodyClass is the pool of buffers of capacity n, -1 if there is none.
func bodyClass(n int) int {
	if n < firstBodyBuffer || n&(n-1) != 0 {
		return -1
	}
	c := bits.TrailingZeros(uint(n)) - bits.TrailingZeros(uint(firstBodyBuffer))
	if c >= bodyClasses {
		return -1
	}
	return c
}

// bodyBuffer is an empty buffer of capacity n: one readBody outgrew
// before, when n is a pool's size and one is there.
func bodyBuffer(n int) []byte {
	if c := bodyClass(n); c >= 0 {
		if h, ok := outgrownBuffers[c].Get().(*[]byte); ok {
			return (*h)[:0]
		}
	}
	return make([]byte, 0, n)
}

// outgrown keeps b, whose bytes readBody has copied into a larger buffer,
// for a later body.
func outgrown(b []byte) {
	if c := bodyClass(cap(b)); c >= 0 {
		outgrownBuffers[c].Put(&b)
	}
}
