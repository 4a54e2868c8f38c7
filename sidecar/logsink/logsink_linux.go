package logsink

import (
	"os"
	"strconv"
	"syscall"
)

// reopenPipe opens descriptor fd's pipe anew, non-blocking; false if fd
// is not a pipe or the open fails. O_NONBLOCK also keeps the open itself
// from waiting: opening a named pipe's write end waits for a reader, and
// with none it fails (ENXIO) instead (an anonymous pipe's open never
// waits).
func reopenPipe(fd int) (*os.File, bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, false
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	return f, true
}
