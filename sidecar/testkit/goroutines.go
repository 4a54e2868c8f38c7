package testkit

import (
	"bytes"
	"runtime"
)

// GoroutineState is the state of the goroutine whose stack has fn, as
// the runtime prints it ("IO wait", "syscall", "running" …; minutes
// waited left off), or "" if there is none. A test tells with it whether
// a goroutine waits on Go's poller ("IO wait") or in a blocking system
// call ("syscall"), where it keeps its P.
func GoroutineState(fn string) string {
	for _, g := range GoroutineStacks() {
		if !bytes.Contains(g, []byte(fn)) {
			continue
		}
		_, rest, _ := bytes.Cut(g, []byte(" ["))
		state, _, _ := bytes.Cut(rest, []byte("]"))
		state, _, _ = bytes.Cut(state, []byte(","))
		return string(state)
	}
	return ""
}

// GoroutineStacks is every goroutine's stack as the runtime prints them,
// one each.
func GoroutineStacks() [][]byte {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Split(buf, []byte("\n\n"))
}
