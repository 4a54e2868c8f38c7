package hop

import (
	"context"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// signaler is what pause stops and resumes (a *procs.Process: its
// process group).
type signaler interface {
	Signal(sig syscall.Signal) error
}

// pause stops p (SIGSTOP) at after from now and lets it go on (SIGCONT)
// d later, on a goroutine of its own: a stop of the proxy made on
// purpose, so that every proxy meets the same backlog and how it comes
// back can be compared (bench hop -pause; docs/hop-cost.md "Falling
// behind, and coming back"). The returned wait returns once p runs
// again; a ctx that ends meanwhile cuts the pause short but never leaves
// p stopped.
func pause(ctx context.Context, p signaler, after, d time.Duration) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !loadgen.Sleep(ctx, after) {
			return
		}
		if p.Signal(syscall.SIGSTOP) != nil {
			return
		}
		defer p.Signal(syscall.SIGCONT)
		loadgen.Sleep(ctx, d)
	}()
	return func() { <-done }
}
