package downstream

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"
)

// watch notices a client that goes away while its request runs: a read
// on the connection that returns an error (the client closed or reset
// it) cancels the request's context. It reads only once the request's
// body has ended, so it never takes the handler's bytes, and only when
// the request is still running WatchAfter later, so a short request costs
// a timer's Reset and Stop and no goroutine.
//
// A byte read (the next request, pipelined) is kept for the connection's
// reader, and the watch ends: net/http's background read does the same.
//
// Where the process has its poller (Linux), the watch does not read: the
// timer's function registers the connection with the poller and returns,
// and the poller peeks when the socket has something (poller_linux.go),
// so a request in flight holds no goroutine for its watch.
type watch struct {
	c *conn
	// poll is the process's poller, nil where there is none or the
	// connection has no descriptor: run reads instead.
	poll *poller
	fd   pollerFD // poll's calls on the connection's descriptor
	id   uint64   // the registration's number with poll, while polled
	// cancel cancels the current request's context.
	cancel context.CancelFunc
	timer  *time.Timer // runs run, made once per connection

	mu sync.Mutex
	// on is set by arm and cleared by disarm (under mu: a handler may
	// read its body on another goroutine).
	on   bool
	cond sync.Cond // on mu: run has finished
	// armed: run may read. Cleared by disarm so a run that has not begun
	// returns at once.
	armed    bool
	reading  bool // run is in its read
	aborting bool // disarm set a deadline in the past to end that read
	ran      bool // run has finished since the last arm
	polled   bool // run registered the connection with poll
	shut     bool // the server closed the connection (closed)
	// gone: the client went away; the connection carries no more requests.
	gone bool
}

// begin starts a request whose context cancel cancels.
func (w *watch) begin(cancel context.CancelFunc) { w.cancel = cancel }

// arm starts the watch WatchAfter from now, on its grid (watchDelay).
func (w *watch) arm() {
	w.mu.Lock()
	if w.on {
		w.mu.Unlock()
		return
	}
	w.on, w.armed, w.ran = true, true, false
	d := w.c.s.watchDelay(time.Now())
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.run)
	} else {
		w.timer.Reset(d)
	}
	w.mu.Unlock()
}

// disarm ends the watch before the connection reads again: a run that
// has begun is ended and waited for.
func (w *watch) disarm() {
	w.mu.Lock()
	on := w.on
	w.on = false
	w.mu.Unlock()
	if !on || w.timer.Stop() {
		return // never armed, or run never started
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
	polled := w.polled
	w.polled = false
	w.mu.Unlock()
	if polled {
		w.poll.remove(w)
	}
}

// stop releases the timer when the connection ends.
func (w *watch) stop() {
	w.disarm()
	if w.timer != nil {
		w.timer.Stop()
	}
}

var aLongTimeAgo = time.Unix(1, 0)

func (w *watch) run() {
	w.mu.Lock()
	if w.armed && w.poll != nil {
		// Registered without mu: the poller takes its own lock, then
		// this one, when it delivers. disarm, meanwhile, waits for ran
		// and then takes the registration out.
		w.mu.Unlock()
		polled := w.poll.add(w)
		w.mu.Lock()
		if polled {
			w.polled = true
			if w.shut {
				w.leftLocked() // Close came between the registration and now
			}
			w.ranLocked()
			return
		}
	}
	if !w.armed {
		w.ranLocked()
		return
	}
	// Reading: no poller, or it could not take the connection.
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
// watch's read would fail and cancel the request, but a closed socket
// leaves the epoll set without an event, so a polled watch cancels here.
func (w *watch) closed() {
	w.mu.Lock()
	w.shut = true
	if w.polled { // cancel is the polled request's: the next one begins after disarm
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
