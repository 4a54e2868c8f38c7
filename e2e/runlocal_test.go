//go:build e2e

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// make run (e2e/tools/run-local.sh) as a user runs it: it refuses ports
// that something already listens on, ends cleanly on Ctrl-C, and fails
// when the sidecar dies under it. It uses bin/, as make run does.

// runLocalPorts finds a base port whose whole block (proxy, admin = +19,
// backends +1000..+1002) is free on 127.0.0.1.
func runLocalPorts(t *testing.T) int {
	t.Helper()
	for range 200 {
		base := 20000 + rand.IntN(20000)
		free := true
		for _, p := range []int{base, base + 19, base + 1000, base + 1001, base + 1002} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free block of ports for make run")
	return 0
}

// script is a running run-local.sh and its combined output.
type script struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{} // closed when it has ended, with err set
	err  error
}

func (s *script) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(b)
}

func (s *script) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func startRunLocal(t *testing.T, port int) *script {
	t.Helper()
	root := cluster.RepoRoot(t)
	for _, b := range []string{"tether-sidecar", "modelsim"} {
		cluster.Binary(t, b) // fails the test with the way to build it
	}
	s := &script{done: make(chan struct{})}
	s.cmd = exec.Command("bash", filepath.Join(root, "e2e", "tools", "run-local.sh"), filepath.Join(root, "bin"))
	s.cmd.Env = append(s.cmd.Environ(), "TETHER_PORT="+strconv.Itoa(port))
	s.cmd.Stdout, s.cmd.Stderr = s, s
	// Its own process group, so the cleanup reaches every process it started.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
	})
	return s
}

// wait returns the script's exit code once it has ended.
func (s *script) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
		var ee *exec.ExitError
		if errors.As(s.err, &ee) {
			return ee.ExitCode()
		}
		if s.err != nil {
			t.Fatal(s.err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("run-local.sh still running after %s:\n%s", within, s.output())
		return -1
	}
}

func (s *script) waitFor(t *testing.T, text string) {
	t.Helper()
	testkit.Eventually(t, 2*time.Minute, "run-local.sh to print "+strconv.Quote(text), func() error {
		select {
		case <-s.done:
			t.Fatalf("run-local.sh ended (%v) before printing %q:\n%s", s.err, text, s.output())
		default:
		}
		if !strings.Contains(s.output(), text) {
			return errors.New("not yet")
		}
		return nil
	})
}

// portsClosed checks that nothing listens on the block any more.
func portsClosed(t *testing.T, base int) {
	t.Helper()
	for _, p := range []int{base, base + 19, base + 1000, base + 1001, base + 1002} {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still listens after run-local.sh ended", p)
		}
	}
}

func TestRunLocalRefusesBusyPorts(t *testing.T) {
	base := runLocalPorts(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+19)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := startRunLocal(t, base)
	if code := s.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1:\n%s", code, s.output())
	}
	out := s.output()
	for _, want := range []string{
		"error: these ports are already in use",
		fmt.Sprintf("127.0.0.1:%d (sidecar admin)", base+19),
		"TETHER_PORT=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tether is up") || strings.Contains(out, fmt.Sprintf("127.0.0.1:%d (sidecar proxy)", base)) {
		t.Errorf("started anyway, or reported a free port as busy:\n%s", out)
	}
}

func TestRunLocalFailsWhenTheSidecarDies(t *testing.T) {
	base := runLocalPorts(t)
	s := startRunLocal(t, base)
	s.waitFor(t, "Ctrl-C to stop.")
	out := s.output()
	if !strings.Contains(out, "served by backend-") || strings.Count(out, "served by ") != 2 {
		t.Fatalf("the demo turns did not run:\n%s", out)
	}
	// The Responses API demo: the second turn reaches the backend that
	// stored the first response.
	if m := regexp.MustCompile(`response (resp_\w+) stored on (backend-\d)\n(?s:.*?)previous_response_id (resp_\w+)\) answered by (backend-\d)`).
		FindStringSubmatch(out); m == nil || m[1] != m[3] || m[2] != m[4] {
		t.Fatalf("the Responses API demo did not chain on one backend:\n%s", out)
	}
	m := regexp.MustCompile(`pid (\d+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no sidecar pid in the output:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, 30*time.Second); code == 0 {
		t.Fatalf("run-local.sh exited 0 after its sidecar died:\n%s", s.output())
	}
	if out := s.output(); !strings.Contains(out, "error: tether-sidecar exited") {
		t.Errorf("no message naming the sidecar:\n%s", out)
	}
	portsClosed(t, base)
}

func TestRunLocalCtrlC(t *testing.T) {
	base := runLocalPorts(t)
	s := startRunLocal(t, base)
	s.waitFor(t, "Ctrl-C to stop.")
	// A terminal sends Ctrl-C's SIGINT to the whole foreground process
	// group: the script and every process it started.
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after Ctrl-C, want 0:\n%s", code, s.output())
	}
	if strings.Contains(s.output(), "error:") {
		t.Errorf("Ctrl-C reported as an error:\n%s", s.output())
	}
	portsClosed(t, base)
}
