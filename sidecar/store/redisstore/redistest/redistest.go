// Package redistest starts real redis-server processes for tests: on a
// free loopback port, with no persistence, killed when the test ends.
// A test that needs Redis fails (never skips) when redis-server is not
// installed, naming the make target that installs it.
package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

// Server is one redis-server process.
type Server struct {
	// Addr is 127.0.0.1:port; it stays the same across Restart.
	Addr string
	Port int

	t    testing.TB
	bin  string
	args []string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *testkit.SyncBuffer
	exited chan struct{}
}

// Start runs redis-server on a free port with the extra args (for
// example "--requirepass", "secret") and waits until it answers PING.
// It is killed at the end of the test.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s := newServer(t, "redis-server", args)
	s.startFresh()
	return s
}

// StartSentinel runs a Sentinel (redis-server --sentinel) watching
// master under masterName, and waits until it reports the master. The
// Sentinel's Addr is what a client lists in `addresses`.
func StartSentinel(t testing.TB, masterName string, master *Server) *Server {
	t.Helper()
	s := newServer(t, "redis-server", nil)
	conf := filepath.Join(s.dir, "sentinel.conf")
	// Sentinel rewrites its config file, so it gets a writable one of its own.
	text := fmt.Sprintf("sentinel resolve-hostnames no\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %[1]s 1000\n", masterName, master.Port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s.args = []string{conf, "--sentinel"}
	s.startFresh()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("redistest: sentinel on %s to know master %q", s.Addr, masterName), func() error {
		reply, err := s.Do("SENTINEL", "get-master-addr-by-name", masterName)
		if err == nil && !strings.Contains(reply, strconv.Itoa(master.Port)) {
			err = fmt.Errorf("it answers %q", reply)
		}
		return err
	})
	return s
}

// StartCluster runs a one-node Redis Cluster that owns every slot: a
// real Cluster endpoint (CLUSTER SLOTS, MOVED-aware clients) without the
// cost of six processes.
func StartCluster(t testing.TB) *Server {
	t.Helper()
	s := newServer(t, "redis-server", []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-announce-ip", "127.0.0.1",
	})
	s.startFresh()
	if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("redistest: cluster on %s ok", s.Addr), func() error {
		info, err := s.Do("CLUSTER", "INFO")
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = fmt.Errorf("CLUSTER INFO %q", info)
		}
		return err
	})
	return s
}

func newServer(t testing.TB, name string, args []string) *Server {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: run `make deps-redis`", name)
	}
	s := &Server{t: t, bin: bin, args: args, dir: t.TempDir()}
	t.Cleanup(s.Kill)
	return s
}

// startFresh picks a free port and starts; a port taken between picking
// and binding (another test's listener) is retried on a new one.
func (s *Server) startFresh() {
	s.t.Helper()
	var err error
	for range 5 {
		s.Port = freePort(s.t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.start(); err == nil {
			return
		}
	}
	s.t.Fatalf("redistest: %v", err)
}

func freePort(t testing.TB) int {
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	args := append([]string{}, s.args...)
	args = append(args,
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning")
	cmd := exec.Command(s.bin, args...)
	out := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so Kill also ends the children redis-server
	// forks (an RDB child for a replica's sync), which would otherwise
	// hold the output pipe open and outlive the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.out, s.exited = cmd, out, exited

	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, out.String())
		default:
		}
		if time.Now().After(deadline) {
			s.killLocked()
			return fmt.Errorf("redis-server on port %d did not answer PING within 10s: %s", s.Port, out.String())
		}
		s.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		s.mu.Lock()
	}
}

// ping reports whether a server answers on addr: PONG, or a NOAUTH error
// when it requires a password (it is up all the same).
func ping(addr string) bool {
	reply, err := do(addr, "PING")
	return (err == nil && reply == "PONG") || (err != nil && strings.HasPrefix(err.Error(), "NOAUTH"))
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it
// to exit. It does nothing when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGCONT) // a paused process must be able to die
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	exited := s.exited
	s.mu.Unlock()
	<-exited
	s.mu.Lock()
	s.cmd = nil
}

// Restart kills the server (if it runs) and starts it again on the same
// port with the same arguments and an empty dataset.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	// The port was ours a moment ago; retry briefly in case the kernel
	// still holds it.
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart: %v", err)
}

// Pause stops the process (SIGSTOP): connections are accepted by the
// kernel but nothing answers, as with a hung Redis. Resume continues it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Do sends one command (plain arguments, no password) and returns the
// reply flattened to text: simple and bulk strings as they are, integers
// in decimal, arrays as their elements joined by newlines. An error reply
// is returned as an error.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr, args...)
}

// Output is what the server printed so far (warnings and errors).
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

func do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var req bytes.Buffer
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(req.Bytes()); err != nil {
		return "", err
	}
	var lines []string
	if err := readReply(bufio.NewReader(c), &lines); err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}

// readReply reads one RESP2 reply, appending its scalar values to out.
func readReply(r *bufio.Reader, out *[]string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
	case '-':
		return replyError(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			*out = append(*out, "")
			return err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		*out = append(*out, string(buf[:n]))
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		for range n {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

type replyError string

func (e replyError) Error() string { return string(e) }
