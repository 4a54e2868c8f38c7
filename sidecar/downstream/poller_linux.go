package downstream

import (
	"log/slog"
	"sync"
	"syscall"

	"github.com/tetherproxy/tether/sidecar/peek"
)

// poller watches the connections of requests that outlive WatchAfter for
// their client going away, all of them on one epoll instance and one
// goroutine for the process, the way Go's own netpoller serves every
// socket's reads. Without it each such request would hold a goroutine
// blocked in a read of its connection: a model server's requests run for
// seconds and come by the thousand, and that goroutine's stack was about
// 4.4 KB of the 11.7 a request in flight held (BenchmarkRequestInFlight).
//
// A connection is registered one-shot for readability or the peer's end
// (EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, level-triggered, so bytes already
// queued report at once), under its RawConn's Control, which keeps the
// descriptor open for the call: a descriptor closed and reused by another
// connection is never touched. Closing a socket takes it out of the epoll
// set, so a connection that ends registered leaves nothing behind. Each
// registration carries its own number; an event whose number is no
// longer registered (the request ended first) is dropped.
type poller struct {
	epfd int
	mu   sync.Mutex
	// watched maps a registration's number to its watch while the
	// request runs; under mu, which also orders an event's delivery
	// before the request's end (remove).
	watched map[uint64]*watch
	next    uint64
	broken  bool // the epoll_wait failed for good: add refuses
	// peek is peekFD, bound once; deliver's, under mu, with its results.
	peek  func(fd uintptr)
	peekN int
	peekE syscall.Errno
}

func (p *poller) peekFD(fd uintptr) { p.peekN, p.peekE = peek.Byte(fd) }

var (
	pollerOnce sync.Once
	thePoller  *poller
)

// clientPoller returns the process's poller, started on first use; nil
// where epoll cannot be had, and the watch reads on its own goroutine.
func clientPoller() *poller {
	pollerOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		p := &poller{epfd: fd, watched: map[uint64]*watch{}}
		p.peek = p.peekFD
		thePoller = p
		go p.loop()
	})
	return thePoller
}

// pollerFD is a watch's epoll_ctl calls on its connection's descriptor,
// run under the connection's RawConn.Control by a method value made on
// the connection's first watch and kept (a closure per call would be an
// allocation; one per accepted connection, most never watched, would be
// work on the accept path). Only the request's side calls it (add in
// run, remove after run has ended).
type pollerFD struct {
	event syscall.EpollEvent
	op    int // EPOLL_CTL_ADD or EPOLL_CTL_DEL
	err   error
	call  func(fd uintptr) // f.ctl
}

func (f *pollerFD) ctl(fd uintptr) {
	f.err = syscall.EpollCtl(thePoller.epfd, f.op, int(fd), &f.event)
}

// on runs op on the connection's descriptor; false if it failed or the
// connection is closed.
func (f *pollerFD) on(raw syscall.RawConn, op int) bool {
	f.op = op
	if f.call == nil {
		f.call = f.ctl
	}
	return raw.Control(f.call) == nil && f.err == nil
}

// add registers w's connection; false if it could not be (the
// connection closed, or epoll refused), and the watch reads instead.
func (p *poller) add(w *watch) bool {
	p.mu.Lock()
	if p.broken {
		p.mu.Unlock()
		return false
	}
	p.next++
	w.id = p.next
	p.watched[w.id] = w
	p.mu.Unlock()
	f := &w.fd
	f.event = syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
		Fd: int32(uint32(w.id)), Pad: int32(uint32(w.id >> 32))}
	if !f.on(w.c.raw, syscall.EPOLL_CTL_ADD) {
		p.mu.Lock()
		delete(p.watched, w.id)
		p.mu.Unlock()
		return false
	}
	return true
}

// remove ends w's registration. When it returns, an event that came for
// it has been delivered in full (its context canceled) or never will be.
func (p *poller) remove(w *watch) {
	p.mu.Lock()
	delete(p.watched, w.id)
	p.mu.Unlock()
	// Taken out even after its one event: a one-shot registration stays
	// in the set, disabled, and the next request's add would fail. A
	// connection closed meanwhile is out already (Control refuses).
	w.fd.on(w.c.raw, syscall.EPOLL_CTL_DEL)
}

func (p *poller) loop() {
	events := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// Not expected (the descriptor is the poller's own, never
			// closed); watches from now on read on their goroutines.
			slog.Error("downstream: the client watch's poller failed; requests now in flight will not notice their client going away, later ones are watched by a read each", "err", err)
			p.mu.Lock()
			p.broken = true
			p.mu.Unlock()
			return
		}
		for _, ev := range events[:n] {
			p.deliver(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
		}
	}
}

// deliver handles an event of registration id: as the watch's read would
// have, a byte queued (the next request, pipelined) ends the watch and the
// client's end of stream or an error cancels the request. Under mu, so
// that the request's end (remove) waits for it.
func (p *poller) deliver(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.watched[id]
	if w == nil {
		return // the request ended first
	}
	delete(p.watched, id)
	if w.c.raw.Control(p.peek) != nil {
		return // closed by the server, which cancels the request (watch.closed)
	}
	if p.peekN > 0 || peek.Empty(p.peekE) {
		return // a byte queued; or nothing (not seen on a socket), and the watch ends as a read's deadline would end it
	}
	w.mu.Lock()
	w.leftLocked()
	w.mu.Unlock()
}
