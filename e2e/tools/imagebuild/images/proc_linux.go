package images

import (
	"os/exec"
	"syscall"
)

// dieWithParent kills cmd when this process dies, so that a go build
// outlives neither `make images` interrupted nor a test killed by its
// timeout.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
