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

// Waiter waits on a socket for something to read without a buffer, on
// the poller, under a syscall.RawConn's Read. A Go read forgets the
// socket's readiness before it calls its function, so the function
// peeks first (what the read it replaces would have cost); once the
// poller has woken it, it reports true without another look, and the
// buffered read that follows waits again if it was woken for nothing.
//
// The downstream server waits so for a request's first byte, the
// upstream transport for a backend's answer: neither holds a buffer
// while a client or a model server takes its time.
//
// A Waiter lives inside the connection it serves; Init it once there.
type Waiter struct {
	polled bool // the poller has been waited on in this wait
	// readable is w.readableFD, made once by Init: a method value made
	// per wait would be an allocation.
	readable func(fd uintptr) bool
}

// Init readies w for its waits; w must not move afterwards.
func (w *Waiter) Init() { w.readable = w.readableFD }

// Wait returns once raw has something to read (or its end, or an error,
// for the read that follows to report), or with raw's error when its
// read deadline passes or it is closed.
func (w *Waiter) Wait(raw syscall.RawConn) error {
	w.polled = false
	return raw.Read(w.readable)
}

// readableFD is Wait's function: true once there is something to read
// (or an end or an error), false to wait on the poller.
func (w *Waiter) readableFD(fd uintptr) bool {
	if w.polled {
		return true
	}
	if _, errno := Byte(fd); Empty(errno) {
		w.polled = true
		return false
	}
	return true
}

// Prober peeks at a socket without waiting, under a syscall.RawConn's
// Control, which neither heeds a read deadline nor prepares the poller.
// The upstream transport asks it whether an idle connection is still
// alive and whether an answer has arrived, the downstream server whether
// a client that ended its stream left a byte queued first.
//
// A Prober lives inside the connection it serves and must not move once
// used: its function is bound on first use (a method value made per
// probe would be an allocation).
type Prober struct {
	probe func(fd uintptr)
	n     int
	errno syscall.Errno
}

// Probe reports what Byte reports of raw's socket; err is Control's (the
// connection is closed), and then n and errno mean nothing.
func (p *Prober) Probe(raw syscall.RawConn) (n int, errno syscall.Errno, err error) {
	if p.probe == nil {
		p.probe = p.probeFD
	}
	if err := raw.Control(p.probe); err != nil {
		return 0, 0, err
	}
	return p.n, p.errno, nil
}

func (p *Prober) probeFD(fd uintptr) { p.n, p.errno = Byte(fd) }
