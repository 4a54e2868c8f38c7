// Package sysmon keeps the Go runtime's system monitor from sleeping
// deeply, which costs a sidecar CPU on every request.
//
// The Go runtime's system monitor (sysmon) sleeps deeply whenever every P
// is idle, and the next system call any goroutine makes wakes it with a
// futex; it then polls every 20 µs until the process is idle again. A
// sidecar at a steady 1,000 requests/s is idle between most requests, so
// that is one cross-thread wake-up and several nanosleeps per request: a
// perf profile under `bench hop` put sysmon and its wake-up at a fifth of
// the sidecar's CPU. With GODEBUG's schedtrace set, sysmon never sleeps
// deeply (so it can print the trace on time): it polls every 10 ms while
// idle instead. The period chosen is the largest the runtime accepts
// (2^31-1 ms, 24.8 days), so the trace itself is a line on stderr at most
// once in that time (the runtime's clock counts from the node's boot, so a
// node up longer than that prints one line at start). A fatal runtime
// error also prints the scheduler's state before the stacks.
package sysmon

import (
	"os"
	"strings"
	"syscall"
)

// GODEBUG is what the GODEBUG environment variable gains.
const GODEBUG = "schedtrace=2147483647"

// Env returns environ with the setting GODEBUG added to the GODEBUG
// variable, and whether that changed anything. It changes nothing when
// GODEBUG sets schedtrace already: GODEBUG=schedtrace=0 keeps Go's
// default.
func Env(environ []string) ([]string, bool) {
	for i, kv := range environ {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			continue
		}
		for _, setting := range strings.Split(v, ",") {
			if strings.HasPrefix(setting, "schedtrace=") {
				return environ, false
			}
		}
		out := append([]string(nil), environ...)
		if v == "" {
			out[i] = "GODEBUG=" + GODEBUG
		} else {
			out[i] = kv + "," + GODEBUG
		}
		return out, true
	}
	return append(append([]string(nil), environ...), "GODEBUG="+GODEBUG), true
}

// KeepAwake re-executes this binary, same arguments and process id,
// with Env's environment: the runtime reads GODEBUG only when it
// starts. It returns only if nothing needs changing (nil) or the exec
// failed (the caller runs on with Go's default).
func KeepAwake() error {
	env, changed := Env(os.Environ())
	if !changed {
		return nil
	}
	return syscall.Exec(selfPath(), os.Args, env)
}

// selfPath is the running binary's path: its real path (not os.Args[0],
// which may be relative or only on PATH), so that the process keeps its
// name (ps, pgrep and /proc/PID/comm take the path's last element), or
// /proc/self/exe if that path no longer holds it.
func selfPath() string {
	path, err := os.Executable()
	if err != nil || strings.HasSuffix(path, " (deleted)") {
		return "/proc/self/exe"
	}
	return path
}
