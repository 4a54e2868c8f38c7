package upstream

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sender is the writer under a connection's buffered writer. Outside a
// send it writes to the connection as it is; the flush of send writes
// the request's last bytes in a way that lets the wait for the answer
// begin without a read.
//
// Why: a Go read resets the socket's readiness and then reads before it
// waits, so the first read after a request is written finds nothing
// (EAGAIN) nearly always, as the backend has not answered yet: one
// system call per request spent on nothing, about 1.5 µs on a VM whose
// system calls are dear (README "The hop's cost"). Written under
// RawConn.Read instead, the request leaves after that reset: any byte
// the backend sends in answer arrives after it, so the poller's report
// of it cannot be lost, and the wait can begin at once. A backend sends
// nothing unasked on a connection it keeps (and alive has checked that
// nothing arrived while it was idle), so nothing read-worthy can have
// arrived before the reset.
type sender struct {
	c *conn
	// await: the next Write is send's flush.
	await bool
	// One awaited write: what is left to write, whether it has been
	// written, and the error of its last write.
	p       []byte
	written bool
	errno   syscall.Errno
	// timedOut: the last send's wait ran to its deadline with nothing
	// to read.
	timedOut bool
	fn       func(fd uintptr) bool // writeFD, made once
}

// send flushes the request and sets the read deadline to soon. When the
// flush has bytes to write (the request's last) and nothing is buffered
// to read, it also waits until the backend's answer begins or soon
// passes, whichever is first, and reports whether soon passed; an error
// is the write's.
func (c *conn) send(soon time.Time) (timedOut bool, err error) {
	_ = c.nc.SetReadDeadline(soon) // before the write: the awaited one's wait heeds it
	if c.raw == nil || c.bw.Buffered() == 0 || c.br.Buffered() > 0 {
		return false, c.bw.Flush()
	}
	s := &c.out
	s.await, s.timedOut = true, false
	err = c.bw.Flush()
	s.await = false
	return s.timedOut, err
}

// Write writes p to the connection; as send's flush, under RawConn.Read,
// followed by the wait (writeFD).
func (s *sender) Write(p []byte) (int, error) {
	if !s.await {
		return s.write(p)
	}
	s.await = false
	s.p, s.written, s.errno = p, false, 0
	werr := s.c.raw.Read(s.fn)
	left := len(s.p)
	s.p = nil
	n := len(p) - left
	switch {
	case s.errno != 0 && s.errno != syscall.EAGAIN:
		return n, &net.OpError{Op: "write", Net: s.c.nc.RemoteAddr().Network(), Addr: s.c.nc.RemoteAddr(), Err: os.NewSyscallError("write", s.errno)}
	case left > 0:
		// Not written whole (a full socket buffer, or the connection
		// closed before the write began): the rest goes the usual way,
		// which waits for room, and the answer's first read will too.
		m, err := s.write(p[n:])
		return n + m, err
	}
	// Written whole: werr is the wait's. A deadline is a wait that
	// found nothing; any other failure (the connection closed by a
	// cancelation) the answer's first read will report.
	s.timedOut = errors.Is(werr, os.ErrDeadlineExceeded)
	return n, nil
}

// write writes p to the connection, each wait for the backend to take
// bytes bounded by the stream idle timeout (conn.writeIdle).
func (s *sender) write(p []byte) (int, error) {
	n, err := s.c.writeIdle.Write(s.c.nc, p)
	return n, s.c.writeIdle.Err(err, idlePkg, "the backend took no byte of the request")
}

// writeFD is the function RawConn.Read runs: first it writes the
// request and returns false, to wait for the answer; called again once
// the socket is readable (or the wait ended), it returns true.
func (s *sender) writeFD(fd uintptr) bool {
	if s.written {
		return true
	}
	for len(s.p) > 0 {
		n, _, errno := syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&s.p[0])), uintptr(len(s.p)))
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 || n == 0 {
			s.errno = errno
			return true
		}
		s.p = s.p[n:]
	}
	s.written = true
	return false
}
