//go:build !linux

package images

import "os/exec"

// dieWithParent: only Linux can tie a child's life to its parent's.
func dieWithParent(*exec.Cmd) {}
