package netcut

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PeerPID returns which of the processes pids owns the far end of a
// loopback TCP connection whose far end is remote and near end local (as
// the near end sees them): the socket in /proc/net/tcp whose local
// address is remote and peer address local, and the process holding that
// socket's inode.
func PeerPID(remote, local *net.TCPAddr, pids []int) (int, error) {
	if !remote.IP.IsLoopback() || remote.IP.To4() == nil {
		return 0, fmt.Errorf("%s is not an IPv4 loopback address", remote)
	}
	inode, err := socketInode(procAddr(remote), procAddr(local))
	if err != nil {
		return 0, err
	}
	return inodeOwner(inode, pids)
}

// procAddr writes an IPv4 address as /proc/net/tcp does: the address's
// four bytes as a little-endian 32-bit hex number, the port in hex.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
}

// socketInode finds the inode of the socket from local to rem.
func socketInode(local, rem string) (string, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fs := strings.Fields(sc.Text())
		if len(fs) >= 10 && fs[1] == local && fs[2] == rem {
			return fs[9], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no socket %s -> %s in /proc/net/tcp", local, rem)
}

// inodeOwner finds which of pids has a descriptor on socket inode.
func inodeOwner(inode string, pids []int) (int, error) {
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && link == want {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("none of processes %v holds socket inode %s", pids, inode)
}
