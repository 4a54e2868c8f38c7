//go:build !linux

package downstream

// poller is Linux's (epoll); elsewhere a watch reads on its own goroutine.
type poller struct{}

type pollerFD struct{}

func clientPoller() *poller       { return nil }
func (*poller) add(w *watch) bool { return false }
func (*poller) forget(w *watch)   {}
