package testkit

import (
	"net"
	"testing"
)

// LoopbackPair is a TCP connection over loopback, its two ends (the
// dialling client's and the accepting server's), both closed when t
// ends: a real socket, for tests of what a connection's descriptor does.
func LoopbackPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}
