package main

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestSidecarLogsThroughItsOwnPipeDescriptor runs the sidecar as a
// process whose stderr is a pipe, as a container's: it writes its log
// through a descriptor of its own on that pipe, non-blocking (package
// logsink), leaves descriptor 2 as it was given (blocking), logs through
// it, and exports the count of lines a slow reader would cost.
func TestSidecarLogsThroughItsOwnPipeDescriptor(t *testing.T) {
	env, log, admin := startSidecar(t, "")
	pid := env[pidKey]
	// target is what descriptor fd refers to, "" if it closed since the
	// directory was read (the sidecar opens and closes others meanwhile:
	// sockets, files).
	target := func(fd string) string {
		link, err := os.Readlink("/proc/" + pid + "/fd/" + fd)
		if errors.Is(err, fs.ErrNotExist) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return link
	}
	nonBlocking := func(fd string) bool {
		info, err := os.ReadFile("/proc/" + pid + "/fdinfo/" + fd)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
				if err != nil {
					t.Fatalf("fdinfo %s: %q", fd, line)
				}
				return flags&syscall.O_NONBLOCK != 0
			}
		}
		t.Fatalf("fdinfo %s has no flags:\n%s", fd, info)
		return false
	}
	stderr := target("2")
	if !strings.HasPrefix(stderr, "pipe:") {
		t.Fatalf("the test gave the sidecar a stderr of %s, not a pipe", stderr)
	}
	if nonBlocking("2") {
		t.Error("descriptor 2 was made non-blocking (its description is shared with other processes)")
	}
	fds, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, fd := range fds {
		if n, _ := strconv.Atoi(fd.Name()); n > 2 && target(fd.Name()) == stderr && nonBlocking(fd.Name()) {
			own = append(own, fd.Name())
		}
	}
	if len(own) != 1 {
		t.Fatalf("descriptors of its own, non-blocking, on stderr's %s: %v, want one", stderr, own)
	}
	testkit.Eventually(t, 10*time.Second, "the log's first lines", func() bool {
		return strings.Contains(log(), `"msg":"go runtime"`)
	})
	if m := scrape(t, "http://"+admin+"/metrics"); !strings.Contains(m, "\ntether_log_lines_dropped_total 0\n") {
		t.Errorf("/metrics: %q", grep(m, "tether_log_lines_dropped_total"))
	}
}
