package loadgen

import (
	"syscall"
	"time"
)

// prSetTimerslack is prctl's PR_SET_TIMERSLACK.
const prSetTimerslack = 29

// preciseSleeps sets this thread's timer slack to 1 ns (the default 50 µs
// would be added to every sleep). The caller has locked its OS thread.
func preciseSleeps() {
	_, _, _ = syscall.Syscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0)
}

// sleepUntil blocks this thread until t with nanosleep(2), which the kernel
// wakes within microseconds, unlike the runtime's timers.
func sleepUntil(t time.Time) {
	for {
		wait := time.Until(t)
		if wait <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(wait))
		if syscall.Nanosleep(&ts, nil) == nil {
			return
		}
	}
}
