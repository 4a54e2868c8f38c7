package server

import (
	"net"
	"syscall"
	"testing"
)

// A loopback listener accepts connections without TCP keep-alive probes
// (four system calls per connection spared); one on any other address
// keeps Go's default, probes on.
func TestLoopbackListenersSkipKeepAliveProbes(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want int
	}{
		{"127.0.0.1:0", 0},
		{"0.0.0.0:0", 1}, // bound on every address; dialled here over loopback
	} {
		l := &listener{addr: tc.addr}
		if err := l.listen(); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.ln.Addr().String())
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			t.Fatal(err)
		}
		accepted, err := l.ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := accepted.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var on int
		var serr error
		raw.Control(func(fd uintptr) { on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) })
		if serr != nil {
			t.Fatal(serr)
		}
		if on != tc.want {
			t.Errorf("listener on %s: SO_KEEPALIVE %d on an accepted connection, want %d", tc.addr, on, tc.want)
		}
		c.Close()
		accepted.Close()
		l.ln.Close()
	}
}
