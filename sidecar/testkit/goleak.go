package testkit

import "go.uber.org/goleak"

// LongLived are goleak's options for the goroutines a process keeps for
// its whole life by design, which a test's leak check must not count:
// the one that waits on the client watch's poller for every sidecar
// listener of the process (sidecar/downstream, poller_linux.go), started
// with the first.
func LongLived() []goleak.Option {
	return []goleak.Option{goleak.IgnoreAnyFunction("github.com/tetherproxy/tether/sidecar/downstream.(*poller).loop")}
}
