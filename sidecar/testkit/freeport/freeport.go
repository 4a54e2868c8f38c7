// Package freeport picks ports for test and bench processes that must be
// told their port before they listen (a sidecar's listeners, memberlist's
// bind, redis-server, modelsim).
//
// A port from the kernel (listen on port 0, then close) is in the
// ephemeral range: between the pick and the child's bind, the kernel may
// hand the same port to any outgoing connection as its local port (a
// kube-apiserver, its etcd and the sidecars' watches make hundreds), and
// the child then fails with "address already in use" (it did, in CI).
// The kernel never hands out a port below that range on its own, so
// Pick draws from below it. It does not import testing, so bench
// binaries use it too.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range Pick draws from: wide
// enough that test processes picking at once (go test runs packages in
// parallel) rarely draw the same port in the moment before one binds it.
const span = 16000

var (
	mu     sync.Mutex
	handed = map[int]bool{} // never hand out a port twice in one process
)

// Pick returns a port free now on ip for both TCP and UDP (memberlist
// binds both), below the kernel's ephemeral range, and not returned
// before by this process.
func Pick(ip string) (int, error) {
	hi := ephemeralLow()
	lo := max(hi-span, 1024)
	mu.Lock()
	defer mu.Unlock()
	for range 500 {
		port := lo + rand.IntN(hi-lo)
		if handed[port] || !free(ip, port) {
			continue
		}
		handed[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no port in %d-%d free on %s for both TCP and UDP", lo, hi-1, ip)
}

// Addr is Pick as "ip:port".
func Addr(ip string) (string, error) {
	port, err := Pick(ip)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)), nil
}

func free(ip string, port int) bool {
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range
// (Linux's default when it cannot be read).
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return linuxDefault
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 2048 {
		return linuxDefault
	}
	return n
}
