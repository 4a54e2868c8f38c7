package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		port, err := Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if port >= low || port < 1024 {
			t.Fatalf("port %d outside [1024, %d)", port, low)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("TCP %s: %v", addr, err)
		}
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("UDP %s: %v", addr, err)
		}
		l.Close()
		u.Close()
	}
}

func TestTakenPortsAreNotFree(t *testing.T) {
	// A port with a TCP listener or a UDP socket on it is not free.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if free("127.0.0.1", l.Addr().(*net.TCPAddr).Port) {
		t.Fatal("a port with a TCP listener counted as free")
	}
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if free("127.0.0.1", u.LocalAddr().(*net.UDPAddr).Port) {
		t.Fatal("a port with a UDP socket counted as free")
	}
}
