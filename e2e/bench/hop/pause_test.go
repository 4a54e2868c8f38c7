package hop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// signals records the signals sent and when.
type signals struct {
	start time.Time
	got   []syscall.Signal
	at    []time.Duration
}

func (s *signals) Signal(sig syscall.Signal) error {
	s.got, s.at = append(s.got, sig), append(s.at, time.Since(s.start))
	return nil
}

func TestPauseStopsThenResumes(t *testing.T) {
	s := &signals{start: time.Now()}
	pause(context.Background(), s, 20*time.Millisecond, 50*time.Millisecond)()
	if len(s.got) != 2 || s.got[0] != syscall.SIGSTOP || s.got[1] != syscall.SIGCONT {
		t.Fatalf("signals %v, want SIGSTOP then SIGCONT", s.got)
	}
	if s.at[0] < 20*time.Millisecond || s.at[1]-s.at[0] < 50*time.Millisecond {
		t.Fatalf("stopped at %v, resumed at %v: want the stop after 20ms and 50ms long", s.at[0], s.at[1])
	}
}

// A run canceled during the pause resumes the process at once; one
// canceled before it never stops it.
func TestPauseNeverLeavesTheProcessStopped(t *testing.T) {
	s := &signals{start: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	wait := pause(ctx, s, 0, time.Hour)
	time.Sleep(20 * time.Millisecond)
	cancel()
	wait()
	if len(s.got) != 2 || s.got[1] != syscall.SIGCONT {
		t.Fatalf("signals %v after a cancel mid-pause, want SIGSTOP then SIGCONT", s.got)
	}
	s = &signals{start: time.Now()}
	pause(ctx, s, time.Hour, time.Hour)()
	if len(s.got) != 0 {
		t.Fatalf("signals %v for a run already canceled, want none", s.got)
	}
}

// On a real process: stopped during the pause (its state T in
// /proc), running after it.
func TestPauseStopsARealProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p := pidSignaler(cmd.Process.Pid)
	wait := pause(context.Background(), p, 0, 300*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	if st := procState(t, cmd.Process.Pid); st != 'T' {
		t.Errorf("state %c during the pause, want T (stopped)", st)
	}
	wait()
	if st := procState(t, cmd.Process.Pid); st == 'T' {
		t.Errorf("state %c after the pause, want it running or sleeping", st)
	}
}

type pidSignaler int

func (p pidSignaler) Signal(sig syscall.Signal) error { return syscall.Kill(int(p), sig) }

// procState is the state letter of /proc/<pid>/stat (R, S, T, ...).
func procState(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return b[i+2]
}
