package downstream

import (
	"log/slog"
	"os"
	"sync"
	"syscall"
)

// poller tells the watches of the process's client connections that
// their client went away, all of them on one epoll instance and one
// goroutine, the way Go's own netpoller serves every socket's reads.
// Without it a request still running after WatchAfter would hold a
// goroutine blocked in a read of its connection; with a registration per
// request it would still cost a timer, a goroutine to register and two
// epoll_ctl calls for each request that outlives WatchAfter, which under
// a backlog is every request (a profile of a sidecar fallen behind at
// 5,000 req/s had that at 3.5% of its samples).
//
// A connection is registered once, on its first request's arm, for the
// peer's end of stream or an error only (EPOLLRDHUP, and EPOLLERR and
// EPOLLHUP, which epoll always reports), one-shot: bytes arriving (the
// next request) raise no event, and the client's end, which lasts, is
// reported once. Level-triggered, so an end that came before the
// registration reports at once. Registered under the connection's
// RawConn.Control, which keeps the descriptor open for the call, so a
// descriptor closed and reused by another connection is never touched;
// closing the socket takes it out of the epoll set. Each registration
// carries its own number, dropped from the poller's map when the
// connection ends (forget), so an event that comes after is dropped too.
//
// The goroutine waits for the epoll instance on Go's own poller (an epoll
// descriptor is readable while it has events), not in a blocking
// epoll_wait: a goroutine blocked in a system call keeps its P until the
// runtime's monitor takes it back, up to 10 ms later while the sidecar is
// quiet, and with one P (package threads) nothing else runs meanwhile. It
// was every client's hang-up: a connection closing every 30 ms put the
// p99 of another client's requests at 17 ms instead of 1.2–1.6
// (docs/hop-cost.md "The poller's own wait").
type poller struct {
	epfd int
	// file holds epfd on Go's poller (and keeps it open: a File no longer
	// referenced is closed by its finalizer); raw waits on it.
	file *os.File
	raw  syscall.RawConn
	mu   sync.Mutex
	// watched maps a registration's number to its connection's watch,
	// until the event or the connection's end.
	watched map[uint64]*watch
	next    uint64
	broken  bool // the epoll_wait failed for good: add refuses
}

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
		// Non-blocking, so that os.NewFile puts it on Go's poller.
		if err := syscall.SetNonblock(fd, true); err != nil {
			syscall.Close(fd)
			return
		}
		file := os.NewFile(uintptr(fd), "client-watch-epoll")
		raw, err := file.SyscallConn()
		if err != nil {
			file.Close()
			return
		}
		thePoller = &poller{epfd: fd, file: file, raw: raw, watched: map[uint64]*watch{}}
		go thePoller.loop()
	})
	return thePoller
}

// pollerFD is a watch's epoll_ctl call on its connection's descriptor,
// run under the connection's RawConn.Control by a method value made for
// the call (once per connection).
type pollerFD struct {
	event syscall.EpollEvent
	err   error
}

func (f *pollerFD) add(fd uintptr) {
	f.err = syscall.EpollCtl(thePoller.epfd, syscall.EPOLL_CTL_ADD, int(fd), &f.event)
}

// add registers w's connection; false if it could not be (the
// connection closed, or epoll refused), and the watch reads instead.
// The caller holds w.mu (the poller's lock comes after a watch's).
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
	f.event = syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
		Fd: int32(uint32(w.id)), Pad: int32(uint32(w.id >> 32))}
	if w.c.raw.Control(f.add) != nil || f.err != nil {
		p.forget(w)
		return false
	}
	return true
}

// forget drops w's registration as its connection ends (the socket's
// close takes it out of the epoll set).
func (p *poller) forget(w *watch) {
	p.mu.Lock()
	delete(p.watched, w.id)
	p.mu.Unlock()
}

// loop delivers the events, waiting for them on Go's poller: RawConn.Read
// forgets the descriptor's readiness, then calls ready, which takes what
// is there without waiting; only when nothing is does Read park the
// goroutine until the descriptor's next readiness, which an event added
// after that look brings.
func (p *poller) loop() {
	events := make([]syscall.EpollEvent, 64)
	var n int
	var err error
	ready := func(fd uintptr) bool {
		n, err = syscall.EpollWait(int(fd), events, 0)
		return n > 0 || err != nil
	}
	for {
		n, err = 0, nil
		if rerr := p.raw.Read(ready); rerr != nil {
			err = rerr
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// Not expected (the descriptor is the poller's own, never
			// closed); connections from now on are watched by reads.
			slog.Error("downstream: the client watch's poller failed; connections now open will not notice their client going away, later ones are watched by a read per request", "err", err)
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

// deliver hands the event of registration id to its watch (without the
// poller's lock: a watch's lock comes first).
func (p *poller) deliver(id uint64) {
	p.mu.Lock()
	w := p.watched[id]
	delete(p.watched, id) // one-shot: no other event comes for it
	p.mu.Unlock()
	if w != nil {
		w.hungUp()
	}
}
