// Package logsink opens the sidecar's log output: its standard error,
// on Go's poller when that is a pipe.
//
// In a container, standard error is a pipe the container runtime reads.
// Descriptors 0–2 are left blocking by Go (they are shared with other
// processes, which a non-blocking flag would surprise), so a write to a
// full pipe blocks in the system call, and a goroutine blocked in a
// system call keeps its P until the runtime's monitor takes it back: up
// to 10 ms later while the sidecar is quiet, and with one P (package
// threads) no request runs meanwhile. A log reader that drains the pipe
// every 120 ms put the added p99 of a sidecar at 1,000 req/s at 11.7 ms
// instead of 0.8 (docs/hop-cost.md "A log reader that falls behind").
//
// Opening /proc/self/fd/2 gives the same pipe a descriptor of its own
// (an open file description: its flags are not the other processes'),
// which os.OpenFile makes non-blocking and puts on Go's poller: a write
// to a full pipe parks its goroutine until the reader makes room. A
// write to a pipe whose reader is gone returns EPIPE instead of raising
// SIGPIPE (which ends a Go program writing to descriptor 1 or 2): the
// sidecar goes on serving without its log.
package logsink

import "os"

// Stderr returns the writer for the sidecar's log: standard error
// opened anew on Go's poller when it is a pipe, else os.Stderr itself (a
// file, which must keep its own offset and O_APPEND, or a terminal,
// /dev/null, a socket; or /proc not mounted). The caller closes the file
// when it is not os.Stderr.
func Stderr() *os.File {
	if p, ok := reopenPipe(2); ok {
		return p
	}
	return os.Stderr
}
