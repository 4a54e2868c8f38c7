// Package lifecycle runs a binary's long-running parts (HTTP servers,
// watchers, informers, loops), each a func(ctx) error, in one errgroup,
// and stops them in order. Both tether binaries start and stop everything
// this way: a part that fails stops the others, and a stop drains the
// listeners before the parts they read from.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Part is one long-running piece of a binary. Run returns nil once ctx
// has ended, or an error when the part fails, which stops the others.
type Part struct {
	Name string
	Run  func(ctx context.Context) error
}

// Group is parts that are stopped together.
type Group []Part

// Run starts every part of every group in one errgroup and runs them until
// ctx ends or a part fails. Then it calls stopping (when not nil) and
// stops the groups in reverse order: the parts of a group are cancelled
// together, and the group before it only once they have all returned. So
// what is listed first stops last: the sidecar's discovery and store keep
// answering while its listeners drain.
//
// Run returns the first failure, prefixed with the part's name. A part
// that returns context.Canceled after it was stopped has not failed.
func Run(ctx context.Context, stopping func(), groups ...Group) error {
	g, failed := errgroup.WithContext(context.Background())
	stops := make([]func(), len(groups))
	for i, grp := range groups {
		// Not derived from ctx: each group is stopped in its turn.
		gctx, cancel := context.WithCancel(context.Background())
		var running sync.WaitGroup
		for _, p := range grp {
			running.Add(1)
			g.Go(func() error {
				defer running.Done()
				err := p.Run(gctx)
				if err == nil || (gctx.Err() != nil && errors.Is(err, context.Canceled)) {
					return nil
				}
				return fmt.Errorf("%s: %w", p.Name, err)
			})
		}
		stops[i] = func() { cancel(); running.Wait() }
	}
	select {
	case <-ctx.Done():
	case <-failed.Done():
	}
	if stopping != nil {
		stopping()
	}
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	return g.Wait()
}

// Drainer is an HTTP server that can be drained: *http.Server, and the
// sidecar's own proxy server.
type Drainer interface {
	// Shutdown stops accepting and waits for in-flight requests to end,
	// or ctx to.
	Shutdown(ctx context.Context) error
	// Close closes every connection at once.
	Close() error
}

// HTTPServer is the part that serves srv (serve is srv.Serve or
// srv.ServeTLS on its listener) until ctx ends, then drains it: srv stops
// accepting and its in-flight requests, long streams included, get drain
// to finish; connections still open then are closed (logged on log). A
// drain of 0 closes at once.
func HTTPServer(name string, srv Drainer, serve func() error, drain time.Duration, log *slog.Logger) Part {
	return Part{Name: name, Run: func(ctx context.Context) error {
		served := make(chan error, 1)
		go func() { served <- serve() }()
		select {
		case err := <-served:
			return err
		case <-ctx.Done():
		}
		if drain > 0 {
			sctx, cancel := context.WithTimeout(context.Background(), drain)
			defer cancel()
			err := srv.Shutdown(sctx)
			if err == nil {
				<-served
				return nil
			}
			log.Warn("drain incomplete; closing remaining connections", "server", name, "err", err)
		}
		srv.Close()
		<-served
		return nil
	}}
}
