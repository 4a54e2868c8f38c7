// Package peek looks at a socket's receive queue without taking from it
// and without waiting: one non-blocking recvfrom(2) of a byte with
// MSG_PEEK. The proxy asks it two questions: has a kept connection's
// backend closed it or sent something unasked while it was idle
// (upstream), and has a client already sent its next request before
// the connection starts to wait for one (downstream).
package peek

import (
	"syscall"
	"unsafe"
)

// Byte peeks at the socket fd. It reports
//   - a byte queued: n 1, errno 0;
//   - the peer's end of stream (it closed its side): n 0, errno 0;
//   - nothing yet: errno EAGAIN (or EWOULDBLOCK; see Empty);
//   - a failure (a reset, a closed descriptor): its errno.
//
// It is the raw system call: syscall.Recvfrom allocates a socket address
// on every call. Call it under syscall.RawConn's Control or Read, which
// keep fd open for the call.
func Byte(fd uintptr) (n int, errno syscall.Errno) {
	var b byte
	r, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b)), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// Empty reports whether errno is Byte's "nothing yet".
func Empty(errno syscall.Errno) bool {
	return errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK
}
