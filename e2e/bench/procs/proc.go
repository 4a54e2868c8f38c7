// Package procs starts and watches the real processes the benchmarks
// measure — tether-sidecar, modelsim, redis-server, HAProxy, nginx — on
// loopback ports, with their configs and logs in one temporary directory,
// and reads their CPU time and peak memory from /proc.
package procs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

// Env is a set of processes sharing a temporary directory. Close stops
// them all and removes the directory.
type Env struct {
	Dir string // configs and logs
	Bin string // where tether-sidecar and modelsim are

	mu    sync.Mutex
	procs []*Process
}

// NewEnv creates the directory. bin holds tether-sidecar and modelsim.
func NewEnv(bin string) (*Env, error) {
	dir, err := os.MkdirTemp("", "tether-bench-")
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	return &Env{Dir: dir, Bin: abs}, nil
}

// Process is one child process in its own process group (so a stop
// reaches what it forks, such as nginx's workers).
type Process struct {
	Name string
	Log  string // stdout and stderr
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs path with args; its output goes to Dir/name.log.
func (e *Env) Start(name, path string, args ...string) (*Process, error) {
	return e.StartEnv(name, path, nil, args...)
}

// StartEnv is Start with env added to this process's environment.
func (e *Env) StartEnv(name, path string, env []string, args ...string) (*Process, error) {
	return e.start(name, path, env, 0, args...)
}

// start is StartEnv; with stderrPause set, the process's standard error
// is a pipe that a slow reader drains (slowReader) into its log.
func (e *Env) start(name, path string, env []string, stderrPause time.Duration, args ...string) (*Process, error) {
	logPath := filepath.Join(e.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	var pr, pw, lf *os.File // the pipe, and the log the reader appends to
	if stderrPause > 0 {
		if lf, err = os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0); err != nil {
			return nil, err
		}
		if pr, pw, err = os.Pipe(); err != nil {
			lf.Close()
			return nil, err
		}
		defer pw.Close() // the child's copy keeps it open
		cmd.Stderr = pw  // passed as a blocking descriptor, as a container runtime's pipe
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		if pr != nil {
			pr.Close()
			lf.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	drained := make(chan struct{})
	if pr != nil {
		go func() {
			defer close(drained)
			slowReader(pr, lf, stderrPause)
			lf.Close()
			pr.Close()
		}()
	} else {
		close(drained)
	}
	go func() { p.err = cmd.Wait(); <-drained; close(p.done) }()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

// slowReader copies r to w in bursts until r ends: it waits pause, then
// takes all that r holds at once, as a log reader that falls behind now
// and then (a container runtime's copying a pipe to a file on a busy
// node). A pipe holds 64 KiB: a writer of more than that per pause finds
// it full.
func slowReader(r, w *os.File, pause time.Duration) {
	raw, err := r.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 256<<10)
	for ended := false; !ended; {
		time.Sleep(pause)
		_ = raw.Read(func(fd uintptr) bool {
			for {
				n, err := syscall.Read(int(fd), buf)
				if n > 0 {
					w.Write(buf[:n])
					continue
				}
				ended = err != syscall.EAGAIN && err != syscall.EINTR
				return true // never wait here: the pause is the wait
			}
		})
	}
}

// Pid of the process (and its process group).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited returns an error naming the exit status and the log's tail if
// the process has ended, nil while it runs.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); last output:\n%s", p.Name, p.err, p.Tail(20))
	default:
		return nil
	}
}

// Tail returns the last n lines of the process's output.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) error { return syscall.Kill(-p.Pid(), sig) }

// Kill sends SIGKILL to the process group and waits for the process to end.
func (p *Process) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM to the process group, then SIGKILL after 5 s.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
	}
}

// Close stops every process (in parallel) and removes the directory.
func (e *Env) Close() {
	e.mu.Lock()
	ps := e.procs
	e.procs = nil
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(p.Stop)
	}
	wg.Wait()
	_ = os.RemoveAll(e.Dir)
}

// FreePort returns a loopback port free at the moment for TCP and UDP,
// below the kernel's ephemeral range (freeport.Pick), for parts that need
// their port before they listen: memberlist's bind, child processes.
func FreePort() (int, error) { return freeport.Pick("127.0.0.1") }

// Port returns a free loopback port not handed out before by this
// process (FreePort).
func (e *Env) Port() (int, error) { return FreePort() }

// Addr returns "127.0.0.1:<free port>".
func (e *Env) Addr() (string, error) {
	p, err := e.Port()
	return fmt.Sprintf("127.0.0.1:%d", p), err
}
