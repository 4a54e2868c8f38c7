package peek

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Byte answers the three states of a socket's receive queue without
// taking from it: nothing yet, a byte (still there for the next read),
// and the peer's end of stream.
func TestByteSeesWithoutTaking(t *testing.T) {
	client, server, raw := tcpPair(t)
	look := func() (n int, errno syscall.Errno) {
		raw.Control(func(fd uintptr) { n, errno = Byte(fd) })
		return n, errno
	}
	// until reports Byte's answer once it stops being "nothing yet" (the
	// bytes a loopback write sends arrive at once, but not synchronously).
	until := func() (int, syscall.Errno) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, errno := look()
			if !Empty(errno) || time.Now().After(deadline) {
				return n, errno
			}
			time.Sleep(time.Millisecond)
		}
	}

	if n, errno := look(); !Empty(errno) {
		t.Fatalf("nothing sent: n %d, errno %v; want EAGAIN", n, errno)
	}
	client.Write([]byte("GET"))
	if n, errno := until(); n != 1 || errno != 0 {
		t.Fatalf("bytes sent: n %d, errno %v; want 1, 0", n, errno)
	}
	if n, errno := look(); n != 1 || errno != 0 {
		t.Fatalf("peeked again: n %d, errno %v; the byte must still be there", n, errno)
	}
	buf := make([]byte, 8)
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "GET" {
		t.Fatalf("read after the peeks: %q, %v; want all three bytes", buf[:n], err)
	}
	client.Close()
	if n, errno := until(); n != 0 || errno != 0 {
		t.Fatalf("peer closed: n %d, errno %v; want 0, 0 (end of stream)", n, errno)
	}
}

// A Waiter's wait ends when bytes arrive, and at once when they arrived
// before it began (a read forgets the socket's readiness first); it takes
// none of them, and ends with the read deadline when none come.
func TestWaiterWaitsWithoutTaking(t *testing.T) {
	client, server, raw := tcpPair(t)
	var w Waiter
	w.Init()
	wait := func() error { return w.Wait(raw) }

	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := wait(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("nothing sent: %v, want the deadline's error", err)
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	done := make(chan error, 1)
	go func() { done <- wait() }()
	client.Write([]byte("GET"))
	if err := <-done; err != nil {
		t.Fatalf("bytes sent during the wait: %v", err)
	}
	if err := wait(); err != nil { // the bytes are still there: no wait at all
		t.Fatalf("bytes sent before the wait: %v", err)
	}
	buf := make([]byte, 8)
	if n, err := server.Read(buf); err != nil || string(buf[:n]) != "GET" {
		t.Fatalf("read %q, %v; want the bytes the waits left", buf[:n], err)
	}
}

// tcpPair is a connection over loopback: its client end, its server end
// and the server end's raw connection, all closed when t ends.
func tcpPair(t *testing.T) (client, server net.Conn, raw syscall.RawConn) {
	t.Helper()
	client, server = testkit.LoopbackPair(t)
	raw, err := server.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return client, server, raw
}

// A Prober answers as Byte under Control does, probe after probe, and
// says so when the connection is closed.
func TestProberAnswersAsByte(t *testing.T) {
	client, server, raw := tcpPair(t)
	var p Prober
	if _, errno, err := p.Probe(raw); err != nil || !Empty(errno) {
		t.Fatalf("nothing sent: errno %v, err %v; want EAGAIN", errno, err)
	}
	client.Write([]byte("x"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, errno, err := p.Probe(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !Empty(errno) {
			if n != 1 || errno != 0 {
				t.Fatalf("a byte sent: n %d, errno %v; want 1, 0", n, errno)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the byte sent never showed")
		}
		time.Sleep(time.Millisecond)
	}
	server.Close()
	if _, _, err := p.Probe(raw); err == nil {
		t.Fatal("a closed connection probed without an error")
	}
}
