package procs

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// Usage is a process tree's CPU time and peak resident memory.
type Usage struct {
	CPU time.Duration // utime+stime of the process and its descendants
	// System is the part of CPU spent in the kernel (stime): system
	// calls, and the socket work and wake-ups they do. The kernel divides
	// a process's exact run time between the two by its timer tick's
	// samples, taken over the process's whole life, so the split of a
	// few seconds of it is rough: compare it over several runs.
	System  time.Duration
	PeakRSS int64 // VmHWM summed over them, bytes
}

// Since is the CPU time spent between an earlier reading and u, with u's
// peak resident memory (a high-water mark has no difference).
func (u Usage) Since(earlier Usage) Usage {
	return Usage{CPU: u.CPU - earlier.CPU, System: u.System - earlier.System, PeakRSS: u.PeakRSS}
}

// Usage reads /proc for the process and every descendant (nginx's
// workers). Threads are included; exited children are not.
func (p *Process) Usage() Usage {
	var u Usage
	for _, pid := range tree(p.Pid()) {
		user, system := cpuOf(pid)
		u.CPU += user + system
		u.System += system
		u.PeakRSS += hwmOf(pid)
	}
	return u
}

// tree returns pid and its descendants.
func tree(root int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], pid)
			}
		}
	}
	out := []int{root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields returns /proc/<pid>/stat's fields after the command name
// (which may contain spaces): [0] is state, [1] ppid, [11] utime, [12] stime.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// cpuOf is a process's utime and stime.
func cpuOf(pid int) (user, system time.Duration) {
	f := statFields(pid)
	if len(f) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut) * clockTick, time.Duration(st) * clockTick
}

// RSS is the process tree's resident memory now (VmRSS summed), bytes.
func (p *Process) RSS() int64 {
	var rss int64
	for _, pid := range tree(p.Pid()) {
		rss += statusBytes(pid, "VmRSS:")
	}
	return rss
}

func hwmOf(pid int) int64 { return statusBytes(pid, "VmHWM:") }

// statusBytes is a memory field of /proc/<pid>/status (in kB there).
func statusBytes(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
