package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

// Process is a child process started by a test: its own process group
// (so a stop reaches anything it forks), killed by the kernel if the test
// binary dies first, its combined output kept for assertions and dumped
// when the test fails.
type Process struct {
	Name string
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer
	done chan struct{}
	err  error // valid once done is closed

	stopOnce sync.Once
}

// StartProcess starts bin with args; env is added to the test's own
// environment. The process is stopped (SIGTERM, then SIGKILL after 10 s)
// in t.Cleanup, after which its output is logged if the test failed.
func StartProcess(t testing.TB, name, bin string, args, env []string) *Process {
	t.Helper()
	p, err := startProcess(name, bin, args, env)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("--- output of %s (last 60 lines):\n%s", name, p.Tail(60))
		}
	})
	return p
}

func startProcess(name, bin string, args, env []string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out := &testkit.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the test binary is killed (go test -timeout), take the child
		// along instead of leaving a stray apiserver behind.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id (and process group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop ends the process group gracefully (SIGTERM, SIGKILL after 10 s) and
// waits for it. Safe to call more than once.
func (p *Process) Stop() { p.stop(syscall.SIGTERM, 10*time.Second) }

// Kill ends the process group at once (SIGKILL) and waits for it.
func (p *Process) Kill() { p.stop(syscall.SIGKILL, 0) }

func (p *Process) stop(sig syscall.Signal, grace time.Duration) {
	p.stopOnce.Do(func() {
		pgid := p.cmd.Process.Pid
		if !p.Exited() {
			_ = syscall.Kill(-pgid, sig)
			if grace > 0 {
				select {
				case <-p.done:
				case <-time.After(grace):
				}
			}
		}
		// Whatever the leader did, nothing of its group may outlive it.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	})
}

// Output is everything the process wrote so far (stdout and stderr).
func (p *Process) Output() string { return p.out.String() }

// Lines returns the complete lines written so far.
func (p *Process) Lines() []string { return p.out.Lines() }

// Tail returns the last n lines of output.
func (p *Process) Tail(n int) string {
	ls := p.out.Lines()
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// Err is the process's exit error once it has ended.
func (p *Process) Err() error {
	if !p.Exited() {
		return errors.New("still running")
	}
	return p.err
}

// FreePort returns a port on ip free a moment ago for TCP and UDP, below
// the kernel's ephemeral range (freeport.Pick: one from that range may
// become an outgoing connection's local port before the process binds
// it). Binaries that cannot take a pre-opened listener need a number.
func FreePort(t testing.TB, ip string) int {
	t.Helper()
	port, err := freeport.Pick(ip)
	if err != nil {
		t.Fatalf("free port on %s: %v", ip, err)
	}
	return port
}

// FreeAddr is FreePort as "ip:port".
func FreeAddr(t testing.TB, ip string) string {
	return net.JoinHostPort(ip, fmt.Sprint(FreePort(t, ip)))
}

// RepoRoot is the directory holding go.mod, found from the working
// directory (go test runs in the package's directory).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Shipped are the binaries that ship as images. The suite runs them from
// the host platform's unpacked image (make images writes
// bin/images/rootfs/<image>/), so what it tests is what ships.
var Shipped = []string{"tether-sidecar", "tether-injector"}

// Binary returns the path of one of the project's binaries. The shipped
// ones (tether-sidecar, tether-injector) come from their image's
// filesystem: $TETHER_ROOTFS/<name>/<name>, default bin/images/rootfs.
// The others (modelsim) from $TETHER_BIN, default bin/. A missing binary
// fails the test with the make target that builds it.
func Binary(t testing.TB, name string) string {
	t.Helper()
	var p, hint string
	if slices.Contains(Shipped, name) {
		root := os.Getenv("TETHER_ROOTFS")
		if root == "" {
			root = filepath.Join(RepoRoot(t), "bin", "images", "rootfs")
		}
		p, hint = filepath.Join(root, name, name), "make images (or set TETHER_ROOTFS)"
	} else {
		dir := os.Getenv("TETHER_BIN")
		if dir == "" {
			dir = filepath.Join(RepoRoot(t), "bin")
		}
		p, hint = filepath.Join(dir, name), "make build (or set TETHER_BIN)"
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s not found at %s: run %s", name, p, hint)
	}
	return p
}
