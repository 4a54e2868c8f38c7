package logsink

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// statusFlags is f's open file description's flags (fcntl F_GETFL),
// read without f.Fd (which may set a descriptor blocking).
func statusFlags(t *testing.T, f *os.File) int {
	t.Helper()
	raw, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags uintptr
	var errno syscall.Errno
	if err := raw.Control(func(fd uintptr) {
		flags, _, errno = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
	}); err != nil || errno != 0 {
		t.Fatalf("fcntl: %v %v", err, errno)
	}
	return int(flags)
}

// reopenedPipe is a pipe whose write end w is blocking, as the standard
// error a container runtime gives a process, and p that end opened anew.
func reopenedPipe(t *testing.T) (r, w, p *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	p, ok := reopenPipe(int(w.Fd())) // Fd sets it blocking
	if !ok {
		t.Fatal("a pipe was not reopened")
	}
	t.Cleanup(func() { p.Close() })
	return r, w, p
}

// TestAFullPipeParksTheWriter: the pipe opened anew is non-blocking (and
// the original is not: the flag is its own description's), and a write
// to it once full waits on Go's poller ("IO wait"), not in the system
// call ("syscall"), where it would hold its P; what it wrote arrives
// whole and in order once read.
func TestAFullPipeParksTheWriter(t *testing.T) {
	r, w, p := reopenedPipe(t)
	if statusFlags(t, p)&syscall.O_NONBLOCK == 0 {
		t.Fatal("the pipe opened anew is blocking")
	}
	if statusFlags(t, w)&syscall.O_NONBLOCK != 0 {
		t.Fatal("reopening made the original descriptor non-blocking")
	}

	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: more than a pipe holds
	wrote := make(chan error, 1)
	go func() { wrote <- writeAll(p, want) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		state := testkit.GoroutineState("logsink.writeAll")
		if state == "IO wait" {
			break
		}
		if state == "syscall" {
			// A moment in write(2) is every write's; staying there is the
			// blocking write this package exists to avoid.
			time.Sleep(100 * time.Millisecond)
			if testkit.GoroutineState("logsink.writeAll") == "syscall" {
				t.Fatal("the writer of a full pipe waits in the system call, holding its P")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer of a full pipe never parked on the poller (state %q)", state)
		}
		time.Sleep(time.Millisecond)
	}
	got, err := io.ReadAll(io.LimitReader(r, int64(len(want))))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not what was written", len(got))
	}
}

// writeAll is the writer's goroutine, named for goroutineState.
func writeAll(f *os.File, b []byte) error {
	_, err := f.Write(b)
	return err
}

// TestAGoneReaderIsAnError: a pipe whose reader goes after it was
// reopened fails its writes with EPIPE, an error the log's writer
// returns, not the SIGPIPE that ends a Go program writing to descriptor
// 2; and a named pipe with no reader left is not reopened, the open
// neither waiting for a reader nor hanging.
func TestAGoneReaderIsAnError(t *testing.T) {
	r, _, p := reopenedPipe(t)
	r.Close()
	if _, err := p.Write([]byte("line\n")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("a write with the reader gone: %v, want EPIPE", err)
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fr, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	fr.Close()
	opened := make(chan bool, 1)
	go func() {
		q, ok := reopenPipe(int(fw.Fd()))
		if ok {
			q.Close()
		}
		opened <- ok
	}()
	select {
	case ok := <-opened:
		if ok {
			t.Fatal("a named pipe without a reader was reopened")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reopening a named pipe without a reader waits for one")
	}
}

// TestOnlyPipesAreReopened: a file keeps its own descriptor (a new one
// would write from offset 0 and without the O_APPEND it may have been
// opened with), and so do /dev/null and a descriptor not open.
func TestOnlyPipesAreReopened(t *testing.T) {
	file, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for name, fd := range map[string]int{"file": int(file.Fd()), "/dev/null": int(null.Fd()), "not open": 1 << 20} {
		if f, ok := reopenPipe(fd); ok {
			f.Close()
			t.Errorf("%s: reopened", name)
		}
	}
}

// TestStderr runs this test binary as a child whose standard error is a
// pipe, then a file: Stderr is a descriptor of its own on Go's poller
// for the pipe, os.Stderr itself for the file, and what the child writes
// to it arrives either way.
func TestStderr(t *testing.T) {
	if os.Getenv("LOGSINK_CHILD") == "1" {
		f := Stderr()
		f.WriteString("written through the sink\n")
		if f == os.Stderr {
			os.Stdout.WriteString("os.Stderr")
		} else if statusFlags(t, f)&syscall.O_NONBLOCK != 0 {
			os.Stdout.WriteString("its own, non-blocking")
		}
		return
	}
	run := func(stderr io.Writer) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStderr$")
		cmd.Env = append(os.Environ(), "LOGSINK_CHILD=1")
		cmd.Stderr = stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(out)), "PASS"))
	}
	var piped bytes.Buffer // not an *os.File: exec gives the child a pipe
	if got := run(&piped); got != "its own, non-blocking" {
		t.Errorf("stderr a pipe: %q, want a descriptor of its own on the poller", got)
	}
	if !strings.Contains(piped.String(), "written through the sink") {
		t.Errorf("stderr a pipe: the line did not arrive: %q", piped.String())
	}
	file, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if got := run(file); got != "os.Stderr" {
		t.Errorf("stderr a file: %q, want os.Stderr", got)
	}
	if b, _ := os.ReadFile(file.Name()); !strings.Contains(string(b), "written through the sink") {
		t.Errorf("stderr a file: the line did not arrive: %q", b)
	}
}
