package netcut

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv("NETCUT_DIALER"); addr != "" {
		dialer(addr)
		return
	}
	goleak.VerifyTestMain(m)
}

// dialer is the helper process standing for another ring member: every
// 20 ms it sends a byte over a new connection to addr and prints "ok" when
// it comes back, "cut" when it does not. It also holds one connection
// open and prints "closed" when the relay closes it.
func dialer(addr string) {
	held, err := net.Dial("tcp", addr)
	if err == nil {
		go func() {
			io.Copy(io.Discard, held)
			os.Stdout.WriteString("closed\n")
		}()
	}
	for {
		ok := false
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			b := []byte{0}
			if _, err := c.Write(b); err == nil {
				_, err = io.ReadFull(c, b)
				ok = err == nil
			}
			c.Close()
		}
		if ok {
			os.Stdout.WriteString("ok\n")
		} else {
			os.Stdout.WriteString("cut\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// echo serves TCP and UDP echo on addr until the test ends.
func echo(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); u.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			u.WriteTo(buf[:n], from)
		}
	}()
}

// TestCutAndHeal: streams and packets between members pass while the ring
// is whole, are dropped across a cut (open streams closed), and pass again
// after the heal. Member 0 is a helper process, member 1 this one.
func TestCutAndHeal(t *testing.T) {
	var helperPID atomic.Int64
	n, err := New(2, func(i int) int {
		if i == 0 {
			return int(helperPID.Load())
		}
		return os.Getpid()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	m0, m1 := n.Members()[0], n.Members()[1]
	echo(t, m1.Bind)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NETCUT_DIALER="+m1.Advertise)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	helperPID.Store(int64(cmd.Process.Pid))
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var last atomic.Value
	last.Store("")
	closed := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "closed" {
				close(closed)
				continue
			}
			last.Store(sc.Text())
		}
	}()
	state := func(want string) func() bool { return func() bool { return last.Load() == want } }

	// UDP from member 0's bound port, through member 1's relay.
	u, err := net.ListenPacket("udp", m0.Bind)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	relay1, _ := net.ResolveUDPAddr("udp", m1.Advertise)
	packet := func() bool {
		u.WriteTo([]byte("p"), relay1)
		u.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		buf := make([]byte, 8)
		k, _, err := u.ReadFrom(buf)
		return err == nil && string(buf[:k]) == "p"
	}

	testkit.Eventually(t, 10*time.Second, "streams pass while whole", state("ok"))
	testkit.Eventually(t, 10*time.Second, "packets pass while whole", packet)

	n.Cut([]int{0}, []int{1})
	testkit.Eventually(t, 10*time.Second, "the open stream closed by the cut", testkit.Closed(closed))
	testkit.Eventually(t, 10*time.Second, "streams dropped across the cut", state("cut"))
	for range 5 {
		if packet() {
			t.Fatal("a packet crossed the cut")
		}
	}
	n.Cut([]int{0, 1})
	testkit.Eventually(t, 10*time.Second, "streams pass inside one group", state("ok"))

	n.Cut([]int{1})
	testkit.Eventually(t, 10*time.Second, "a member in no group is alone", state("cut"))
	n.Heal()
	testkit.Eventually(t, 10*time.Second, "streams pass after the heal", state("ok"))
	testkit.Eventually(t, 10*time.Second, "packets pass after the heal", packet)
}

func TestPeerPID(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pid, err := PeerPID(s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr), []int{1, os.Getpid()})
	if err != nil || pid != os.Getpid() {
		t.Fatalf("PeerPID = %d, %v; want this process %d", pid, err, os.Getpid())
	}
	if _, err := PeerPID(s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr), []int{1}); err == nil ||
		!strings.Contains(err.Error(), "none of processes") {
		t.Fatalf("PeerPID among others: %v", err)
	}
}
