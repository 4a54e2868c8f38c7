package config

import (
	"net"
	"strconv"
	"testing"
)

// meshPorts are the ports a service mesh's proxy takes inside every pod it
// joins, so a sidecar next to it cannot bind them.
var meshPorts = map[int]string{
	// Istio (sidecar and ztunnel) reserves 15000-15090; these are in use.
	15000: "Istio Envoy admin", 15001: "Istio outbound capture", 15004: "Istio debug",
	15006: "Istio inbound capture", 15008: "Istio HBONE", 15009: "Istio HBONE (secure)",
	15020: "Istio merged metrics", 15021: "Istio health", 15053: "Istio DNS proxy",
	15090: "Istio Envoy Prometheus",
	// Linkerd's proxy.
	4140: "Linkerd outbound", 4143: "Linkerd inbound", 4191: "Linkerd admin",
}

// collides says why port is unusable next to a mesh, or "".
func collides(port int) string {
	if name, ok := meshPorts[port]; ok {
		return name
	}
	if port >= 15000 && port <= 15090 {
		return "Istio's reserved range 15000-15090"
	}
	if port >= 32768 {
		return "the Linux ephemeral range (outgoing connections take these ports)"
	}
	return ""
}

func TestDefaultPortsClearOfMeshes(t *testing.T) {
	for name, addr := range map[string]string{
		"DefaultListen":     DefaultListen,
		"DefaultAdmin":      DefaultAdmin,
		"DefaultGossipBind": DefaultGossipBind,
	} {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s %q: %v", name, addr, err)
		}
		port, _ := strconv.Atoi(p)
		if why := collides(port); why != "" {
			t.Errorf("%s %s collides with %s", name, addr, why)
		}
	}
	for name, c := range map[string]struct {
		port int
		addr string
	}{
		"DefaultListenPort": {DefaultListenPort, DefaultListen},
		"DefaultAdminPort":  {DefaultAdminPort, DefaultAdmin},
		"DefaultGossipPort": {DefaultGossipPort, DefaultGossipBind},
	} {
		if _, p, _ := net.SplitHostPort(c.addr); p != strconv.Itoa(c.port) {
			t.Errorf("%s = %d, but its address default is %s", name, c.port, c.addr)
		}
	}
	if why := collides(DefaultDebugPort); why != "" {
		t.Errorf("DefaultDebugPort %d collides with %s", DefaultDebugPort, why)
	}
	seen := map[int]bool{}
	for _, p := range []int{DefaultListenPort, DefaultAdminPort, DefaultDebugPort, DefaultGossipPort} {
		if seen[p] {
			t.Errorf("port %d is the default of two listeners", p)
		}
		seen[p] = true
	}
}

// TestCollides keeps the check itself honest: the seed's old defaults
// (15001, 15020) must be caught.
func TestCollides(t *testing.T) {
	for _, p := range []int{15001, 15020, 15050, 4143, 40000} {
		if collides(p) == "" {
			t.Errorf("port %d not reported", p)
		}
	}
	for _, p := range []int{7946, 8080, 17001} {
		if why := collides(p); why != "" {
			t.Errorf("port %d reported: %s", p, why)
		}
	}
}
