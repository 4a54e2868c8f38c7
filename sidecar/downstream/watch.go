package downstream

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/peek"
)

// watch notices a client that goes away while its request runs: the
// client's end of stream or an error on its connection cancels the
// request's context. It looks only once the request's body has ended,
// so it never takes the handler's bytes; a byte queued after the request
// (the next one, pipelined) ends its look without canceling, as
// net/http's background read does.
//
// It works one of two ways.
//
// On the process's poller (Linux): the connection is registered once, at
// its first request's arm, for the client's end of stream or an error
// (poller_linux.go), and stays registered until it closes. A request's
// watch is then a flag that arm sets and disarm clears: no system call,
// timer or goroutine per request, however long it runs. When the event
// comes (whenever the client hangs up), a request past its body looks at
// the socket at once; a request whose body ends after the event looks as
// it arms. The event is the client's end, which lasts, so every later
// request of the connection looks as it arms.
//
// Reading (elsewhere, on a connection without a descriptor, or one the
// poller refused): a request still running WatchAfter after its body
// has a goroutine read a byte from the connection. A byte read is kept
// for the connection's reader and ends the watch.
type watch struct {
	c *conn
	// poll is the process's poller, nil where there is none or the
	// connection has no descriptor: the watch reads.
	poll *poller
	fd   pollerFD // poll's registration call on the connection's descriptor
	id   uint64   // the connection's registration number with poll
	// cancel cancels the current request's context.
	cancel context.CancelFunc
	timer  *time.Timer // runs run (reading), made once per connection

	mu sync.Mutex
	// on is set by arm and cleared by disarm (under mu: a handler may
	// read its body on another goroutine).
	on bool

	// The poller's way (under mu).
	registered bool // the connection is on poll, for the rest of its life
	refused    bool // poll could not take it: the watch reads from now on
	hup        bool // poll reported the client's end of stream or an error
	prober     peek.Prober

	// The reading way (under mu).
	cond sync.Cond // run has finished
	// armed: run may read. Cleared by disarm so a run that has not begun
	// returns at once.
	armed    bool
	reading  bool // run is in its read
	aborting bool // disarm set a deadline in the past to end that read
	ran      bool // run has finished since the last arm

	shut bool // the server closed the connection (closed)
	// gone: the client went away; the connection carries no more requests.
	gone bool
}

// begin starts a request whose context cancel cancels.
func (w *watch) begin(cancel context.CancelFunc) { w.cancel = cancel }

// arm starts the watch of a request whose body has ended: on the
// poller at once, reading WatchAfter from now, on its grid (watchDelay).
func (w *watch) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		return
	}
	w.on = true
	if w.polledLocked() {
		switch {
		case w.shut:
			w.leftLocked() // Close came first: its socket gives no event
		case w.hup:
			w.lookLocked()
		}
		return
	}
	w.armed, w.ran = true, false
	d := w.c.s.watchDelay(time.Now())
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.run)
	} else {
		w.timer.Reset(d)
	}
}

// polledLocked reports whether the connection is on the poller,
// registering it on its first request (under mu: the poller's lock is
// taken after a watch's, never before it).
func (w *watch) polledLocked() bool {
	if !w.registered && !w.refused && w.poll != nil {
		w.registered = w.poll.add(w)
		w.refused = !w.registered
	}
	return w.registered
}

// disarm ends the watch before the connection reads again: a read that
// has begun is ended and waited for.
func (w *watch) disarm() {
	w.mu.Lock()
	on := w.on
	w.on = false
	polled := w.registered
	w.mu.Unlock()
	if !on || polled || w.timer.Stop() {
		return // never armed, on the poller, or run never started
	}
	w.mu.Lock()
	w.armed = false
	for !w.ran {
		if w.reading && !w.aborting {
			w.aborting = true
			_ = w.c.nc.SetReadDeadline(aLongTimeAgo)
		}
		w.cond.Wait()
	}
	w.aborting = false
	w.mu.Unlock()
}

// stop ends the watch for good when the connection ends, before it is
// closed (the close takes the socket out of the poller's set).
func (w *watch) stop() {
	w.disarm()
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Lock()
	polled := w.registered
	w.mu.Unlock()
	if polled {
		w.poll.forget(w)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// hungUp is the poller's event for the connection: the client's end of
// stream or an error. It lasts, so a request that arms later looks too.
func (w *watch) hungUp() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hup = true
	if w.on {
		w.lookLocked()
	}
}

// lookLocked, under mu, peeks at the socket as the reading way's read
// would read it: the client's end of stream or an error cancels the
// request; a byte queued (a pipelined request) does not.
func (w *watch) lookLocked() {
	n, errno, err := w.prober.Probe(w.c.raw)
	if err != nil {
		return // closed: by Close, which cancels (closed), or as the connection ends
	}
	if n > 0 || peek.Empty(errno) {
		return
	}
	w.leftLocked()
}

// run is the reading way's: the timer's function, WatchAfter after arm.
func (w *watch) run() {
	w.mu.Lock()
	if !w.armed {
		w.ranLocked()
		return
	}
	// Under mu, before reading is set: disarm's deadline in the past,
	// set once it sees reading, must not be overwritten.
	w.c.clearLeftDeadline()
	w.reading = true
	w.mu.Unlock()

	in := &w.c.in
	n, err := w.c.nc.Read(in.extra[:])

	w.mu.Lock()
	w.reading = false
	if n > 0 {
		in.hasExtra = true
	}
	if err != nil && !w.aborting && !errors.Is(err, os.ErrDeadlineExceeded) {
		w.leftLocked()
	}
	w.ranLocked()
}

// ranLocked ends run, under mu, and releases mu.
func (w *watch) ranLocked() {
	w.ran = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

// closed is the server's Close, which has closed the connection: a
// reading watch's read fails and cancels the request, but a closed
// socket leaves the poller's set without an event, so a request on the
// poller is canceled here.
func (w *watch) closed() {
	w.mu.Lock()
	w.shut = true
	if w.on && w.registered { // cancel is this request's: the next begins after disarm
		w.leftLocked()
	}
	w.mu.Unlock()
}

// leftLocked, under mu, records that the client went away and cancels
// its request (context cancelation runs no code of the watch's, so mu
// may be held).
func (w *watch) leftLocked() {
	w.gone = true
	w.cancel()
}

// clientGone reports whether the watch saw the client go away.
func (w *watch) clientGone() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}
