package procs

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// burnEnv makes the test binary, run as a child, burn CPU the way its
// value says and then wait to be killed, so its /proc entry stays
// readable: "user" computes, "kernel" maps and unmaps a populated
// megabyte (the kernel allocates and clears its pages; no byte of it is
// touched in user space, where the race detector would add its own work).
const burnEnv = "PROCS_TEST_BURN"

// burnFor is how much CPU a burning child spends: its own CPU time, not
// the clock's, so a child that waits for a core on a busy machine burns
// as much as one that does not. The test reads the split from burnFrom
// on: a child's start (the runtime's set-up, and the race detector's
// shadow memory under -race) is kernel work whatever it then burns, 30
// to 60 ms of it under -race, which in a short burn alone put the
// computing child near a quarter of its CPU in the kernel.
const (
	burnFrom = 150 * time.Millisecond
	burnFor  = 600 * time.Millisecond
)

// cpuTime is this process's CPU time so far, user and kernel.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		os.Exit(2)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestMain(m *testing.M) {
	switch os.Getenv(burnEnv) {
	case "":
		os.Exit(m.Run())
	case "user":
		x := uint64(1)
		for cpuTime() < burnFor {
			for range 1 << 16 {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		if x == 0 {
			os.Exit(2) // keeps the loop from being optimized away
		}
	case "stderr":
		os.Stderr.Write(stderrLines())
		os.Exit(0)
	case "kernel":
		for cpuTime() < burnFor {
			b, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE,
				syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_POPULATE)
			if err != nil {
				os.Exit(2)
			}
			if err := syscall.Munmap(b); err != nil {
				os.Exit(2)
			}
		}
	case "hold":
		// Maps and populates heldBytes, keeps them, and waits.
		if _, err := syscall.Mmap(-1, 0, heldBytes, syscall.PROT_READ|syscall.PROT_WRITE,
			syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_POPULATE); err != nil {
			os.Exit(2)
		}
		os.Stderr.WriteString("held\n")
	}
	time.Sleep(time.Minute)
	os.Exit(0)
}

// heldBytes is what a "hold" child keeps resident.
const heldBytes = 48 << 20

// burnt starts a child burning the given way and returns its usage over
// the burn from burnFrom until it has spent nearly burnFor (/proc counts
// in 10 ms ticks); PeakRSS is the end's.
func burnt(t *testing.T, how string) Usage {
	t.Helper()
	p := startChild(t, "burn-"+how, how, 0)
	spent := func(d time.Duration) Usage {
		var u Usage
		testkit.Eventually(t, 20*time.Second, "the "+how+" child's burn", func() error {
			if u = p.Usage(); u.CPU < d {
				return fmt.Errorf("it spent %v of CPU, want %v (exited: %v)", u.CPU, d, p.Exited())
			}
			return nil
		})
		return u
	}
	from := spent(burnFrom)
	return spent(burnFor * 9 / 10).Since(from)
}

func TestUsageSplitsUserSpaceAndKernel(t *testing.T) {
	user, kernel := burnt(t, "user"), burnt(t, "kernel")
	if user.System < 0 || user.System > user.CPU/4 {
		t.Errorf("a child computing: %v of its %v CPU in the kernel, want under a quarter", user.System, user.CPU)
	}
	if kernel.System < kernel.CPU/2 || kernel.System > kernel.CPU {
		t.Errorf("a child mapping memory: %v of its %v CPU in the kernel, want over half", kernel.System, kernel.CPU)
	}
	if user.PeakRSS <= 0 || kernel.PeakRSS < 1<<20 {
		t.Errorf("peak RSS %d and %d bytes, want some, and the populated megabyte's in the second", user.PeakRSS, kernel.PeakRSS)
	}
}

// startChild runs this test binary as a child doing what burnEnv=how
// says, its stderr a pipe drained every stderrPause when set.
func startChild(t *testing.T, name, how string, stderrPause time.Duration) *Process {
	t.Helper()
	e, err := NewEnv(".")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.start(name, self, []string{burnEnv + "=" + how}, stderrPause)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRSSIsWhatIsResidentNow: a child holding a populated mapping has at
// least its size resident, and no more than its peak.
func TestRSSIsWhatIsResidentNow(t *testing.T) {
	p := startChild(t, "hold", "hold", 0)
	testkit.Eventually(t, 20*time.Second, "the child's mapping", func() error {
		if !strings.Contains(p.Tail(5), "held") {
			return fmt.Errorf("not held yet (exited: %v)", p.Exited())
		}
		return nil
	})
	rss, peak := p.RSS(), p.Usage().PeakRSS
	if rss < heldBytes || rss > peak {
		t.Errorf("RSS %d bytes with a %d-byte mapping held (peak %d): want at least the mapping, at most the peak", rss, heldBytes, peak)
	}
}
