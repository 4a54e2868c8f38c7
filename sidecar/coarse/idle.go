package coarse

import (
	"errors"
	"net"
	"os"
	"time"
)

// IdleDeadline bounds how long a connection may go without a byte moving
// one way: a deadline kept at least D ahead of every read (or write),
// moved only when less than D is left, and then to 3/2 D ahead.
//
// Why not one deadline per read: a stream of a thousand SSE events reads
// a thousand times, and each deadline set is a timer update under the
// runtime's timer lock. Moved lazily, a stream costs a clock reading per
// read and a timer update per D/2 at most; a connection that goes quiet
// fails between D and 3/2 D after its last byte. A sidecar's stream idle
// timeout is minutes: the slack is of no consequence, the timer updates
// would be.
type IdleDeadline struct {
	// D is the idle bound; D <= 0 never sets a deadline.
	D  time.Duration
	at time.Time // the deadline set last; zero: none (or forgotten)
}

// Next returns the deadline to set before a read or write at now, and
// true, when the one set is less than D ahead (or none is); false when
// it may stay.
func (d *IdleDeadline) Next(now time.Time) (time.Time, bool) {
	if d.D <= 0 || !d.at.IsZero() && d.at.Sub(now) >= d.D {
		return time.Time{}, false
	}
	d.at = now.Add(d.D + d.D/2)
	return d.at, true
}

// Forget says the connection's deadline was set otherwise since: the
// next Next sets its own.
func (d *IdleDeadline) Forget() { d.at = time.Time{} }

// WriteStep is the most Write writes at once, so that each step's wait
// has the bound ahead of it, however large the bytes written (bufio
// passes a large write through whole).
const WriteStep = 64 << 10

// Write writes p to c in steps of at most WriteStep, moving c's write
// deadline ahead of each as Next says: the bound applies to each wait
// for the peer to take bytes. A step that waited for the bound fails
// with an error that is os.ErrDeadlineExceeded (errors.Is).
func (d *IdleDeadline) Write(c net.Conn, p []byte) (int, error) {
	if d.D <= 0 {
		return c.Write(p)
	}
	written := 0
	for len(p) > 0 {
		if t, ok := d.Next(time.Now()); ok {
			_ = c.SetWriteDeadline(t)
		}
		n, err := c.Write(p[:min(len(p), WriteStep)])
		written += n
		p = p[n:]
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// IdleError is the error of a read or write that waited an
// IdleDeadline's bound: a timeout. What says who did not do what.
type IdleError struct {
	Pkg, What string // "upstream", "the backend sent no byte of its response"
	D         time.Duration
}

func (e IdleError) Error() string { return e.Pkg + ": " + e.What + " for " + e.D.String() }
func (IdleError) Timeout() bool   { return true }
func (IdleError) Temporary() bool { return true }

// Err is err as an IdleError (pkg, what) when the deadline's bound ended
// the read or write it came from, else err itself.
func (d *IdleDeadline) Err(err error, pkg, what string) error {
	if err != nil && d.D > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return IdleError{Pkg: pkg, What: what, D: d.D}
	}
	return err
}
