package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/sysmon"
	"github.com/tetherproxy/tether/sidecar/testkit"
	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

// TestMain lets a test run this package's main as a process of its own:
// the test binary with TETHER_SIDECAR_MAIN=1 is tether-sidecar.
func TestMain(m *testing.M) {
	if os.Getenv("TETHER_SIDECAR_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSidecarKeepsSysmonAwake runs the sidecar as a process: it re-executes
// itself with the GODEBUG setting (same process id, serving), and leaves a
// GODEBUG that sets schedtrace alone.
func TestSidecarKeepsSysmonAwake(t *testing.T) {
	for _, c := range []struct {
		godebug, want string
	}{
		{"", sysmon.GODEBUG},
		{"gctrace=0", "gctrace=0," + sysmon.GODEBUG},
		{"schedtrace=0", "schedtrace=0"},
	} {
		t.Run(c.godebug, func(t *testing.T) {
			env, log, _ := startSidecar(t, c.godebug)
			if got := env["GODEBUG"]; got != c.want {
				t.Errorf("the serving process's GODEBUG = %q, want %q", got, c.want)
			}
			// The process keeps its name (the kernel's: 15 bytes at most).
			if want := filepath.Base(os.Args[0]); env[commKey] != want[:min(len(want), 15)] {
				t.Errorf("the serving process's name = %q, want %q", env[commKey], want)
			}
			// Info lines are written in batches, within 100 ms.
			want := fmt.Sprintf(`"godebug":%q`, c.want)
			testkit.Eventually(t, 5*time.Second, "the log line "+want, func() bool {
				return strings.Contains(log(), want)
			})
		})
	}
}

// startSidecar runs main with a memory store and GODEBUG set to godebug
// (unset if empty), and extra added to its environment, waits until it is
// ready, and returns the environment of the process serving under the
// started process id (and its name and id, under commKey and pidKey), its
// log and its admin address.
func startSidecar(t *testing.T, godebug string, extra ...string) (map[string]string, func() string, string) {
	t.Helper()
	dir := t.TempDir()
	var addrs [2]string
	for i := range addrs {
		port, err := freeport.Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	cfg := fmt.Sprintf(`listen: %s
admin: %s
store: {backend: memory}
pools:
  - name: p
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: ["127.0.0.1:1"]}
`, addrs[0], addrs[1])
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "--config", path)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GODEBUG=") || strings.HasPrefix(kv, "GOMAXPROCS=")
	}), "TETHER_SIDECAR_MAIN=1")
	if godebug != "" {
		cmd.Env = append(cmd.Env, "GODEBUG="+godebug)
	}
	cmd.Env = append(cmd.Env, extra...)
	var out testkit.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("sidecar exit: %v\n%s", err, out.String())
		}
	})
	client := &http.Client{Timeout: time.Second}
	testkit.Eventually(t, 20*time.Second, "the sidecar ready", func() bool {
		resp, err := client.Get("http://" + addrs[1] + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(raw, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	env[commKey] = strings.TrimSpace(string(comm))
	env[pidKey] = fmt.Sprint(cmd.Process.Pid)
	return env, out.String, addrs[1]
}

// commKey holds, in startSidecar's map, the process's name; pidKey its id.
const (
	commKey = "/proc/PID/comm"
	pidKey  = "PID"
)
