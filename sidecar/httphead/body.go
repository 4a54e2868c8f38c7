package httphead

import (
	"bufio"
	"io"
)

// Body is a message body of known length, read from the connection's
// reader as net/http's body reads one: io.EOF with its last bytes (so a
// transport sees the end without another read), io.ErrUnexpectedEOF
// when the source ends first. A caller keeps one per connection (or per
// response) and Resets it for each message, so framing a body costs no
// allocation.
type Body struct {
	r    *bufio.Reader
	left int64
}

// Reset makes b the next n bytes of r.
func (b *Body) Reset(r *bufio.Reader, n int64) { b.r, b.left = r, n }

func (b *Body) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// Buffered reports whether the rest of the body is in the reader's
// buffer: reading it waits for no byte.
func (b *Body) Buffered() bool { return b.left <= int64(b.r.Buffered()) }

// Close does nothing: what is left unread stays on the connection, for
// its owner to drain or close.
func (b *Body) Close() error { return nil }

// Unread is what r holds, unread: where Request and Response find a
// head, and Complete judges one, without reading the connection.
func Unread(r *bufio.Reader) []byte {
	buf, _ := r.Peek(r.Buffered())
	return buf
}
