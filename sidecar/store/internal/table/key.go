package table

import "crypto/sha256"

// Key is a store key in 16 bytes: the 128 bits of a session.StoreKey
// without its hex encoding (a 32-character string costs 32 bytes plus a
// 16-byte header, and a pointer for the garbage collector to follow).
type Key [16]byte

// KeyOf turns a store key into its 16-byte form. A key in the form
// session.StoreKey makes (32 lowercase hex digits) is decoded; any other
// string is hashed (SHA-256, first 16 bytes), the same way in every
// process, so odd keys still work and distinct strings still map to
// distinct keys (but for a hash collision).
func KeyOf(s string) Key {
	var k Key
	if len(s) == 2*len(k) {
		ok := true
		for i := range k {
			hi, lo := hexVal[s[2*i]], hexVal[s[2*i+1]]
			ok = ok && hi|lo < 16
			k[i] = hi<<4 | lo
		}
		if ok {
			return k
		}
	}
	sum := sha256.Sum256([]byte(s))
	copy(k[:], sum[:len(k)])
	return k
}

// hexVal maps lowercase hex digits to their value and every other byte to
// 0xff. Upper case is refused so that one key has one spelling.
var hexVal = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()
