package inject

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Service meshes inject a proxy of their own. Their webhooks usually run
// before this one (the API server calls mutating webhooks in the order of
// their configurations' names: istio-sidecar-injector and
// linkerd-proxy-injector before tether-injector), so the pod already holds
// their containers when tether sees it.
const (
	istioProxy   = "istio-proxy"
	linkerdProxy = "linkerd-proxy"

	istioIncludeInbound  = "traffic.sidecar.istio.io/includeInboundPorts"
	istioExcludeInbound  = "traffic.sidecar.istio.io/excludeInboundPorts"
	istioExcludeOutbound = "traffic.sidecar.istio.io/excludeOutboundPorts"
)

// meshPorts are the ports a mesh's proxy takes in every pod it joins,
// declared or not (Envoy's capture ports are never declared).
var meshPorts = []struct {
	proxy    string
	from, to int32
	what     string
}{
	{istioProxy, 15000, 15090, "one of Istio's ports (15000-15090)"},
	{linkerdProxy, 4140, 4140, "Linkerd's outbound port"},
	{linkerdProxy, 4143, 4143, "Linkerd's inbound port"},
	{linkerdProxy, 4191, 4191, "Linkerd's admin port"},
}

// meshPortOwner says whose port p is, when a mesh proxy in the pod takes
// it: what the port is and the proxy's container name.
func meshPortOwner(pod *corev1.Pod, p int32) (what, proxy string) {
	for _, m := range meshPorts {
		if p >= m.from && p <= m.to && hasContainer(pod, m.proxy) {
			return m.what, m.proxy
		}
	}
	return "", ""
}

// sidecarIndex is where the native sidecar goes in initContainers: first,
// so it is up before the app, but after a mesh's own native sidecar
// (istio-proxy, linkerd-proxy) and the init containers before it. The
// mesh's iptables rules (set up by its init container, or by its CNI
// plugin before any container) send tether's connections to the mesh
// proxy: tether must start after that proxy is up, or its first API and
// model-server connections go nowhere and its startup probe never passes.
// Native sidecars stop in reverse order, so the mesh proxy also outlives
// tether's last streams.
func sidecarIndex(pod *corev1.Pod) int {
	i := 0
	for j, c := range pod.Spec.InitContainers {
		if (c.Name == istioProxy || c.Name == linkerdProxy) && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			i = j + 1
		}
	}
	return i
}

// meshWarnings reminds the user of the Istio settings tether needs when an
// istio-proxy sidecar captures the pod's traffic. Istio's injector ran
// before this one, so it did not see tether's ports: its capture takes
// them too, and under STRICT mTLS the kubelet's plaintext probes on the
// admin port are refused. The settings must be on the pod template
// (Istio reads them when it injects), so tether cannot add them itself.
func meshWarnings(pod *corev1.Pod, pl *plan) []string {
	if !hasContainer(pod, istioProxy) {
		return nil
	}
	var w []string
	inbound := []int{pl.adminPort}
	if pl.store == "gossip" {
		inbound = append(inbound, pl.gossipPort)
	}
	include := portSet(pod.Annotations[istioIncludeInbound])
	exclude := portSet(pod.Annotations[istioExcludeInbound])
	var captured []int
	for _, p := range inbound {
		if (len(include) == 0 || include["*"] || include[strconv.Itoa(p)]) && !exclude[strconv.Itoa(p)] {
			captured = append(captured, p)
		}
	}
	if len(captured) > 0 {
		w = append(w, fmt.Sprintf("tether: istio-proxy captures the sidecar's inbound ports %s (under STRICT mTLS the kubelet's probes and gossip fail); "+
			"add them to the pod template's %s annotation", joinInts(captured), istioExcludeInbound))
	}
	if pl.store == "gossip" && !portSet(pod.Annotations[istioExcludeOutbound])[strconv.Itoa(pl.gossipPort)] {
		w = append(w, fmt.Sprintf("tether: istio-proxy captures gossip to the other replicas (port %d; under STRICT mTLS it is refused); "+
			"add it to the pod template's %s annotation (the gossip key encrypts it already)", pl.gossipPort, istioExcludeOutbound))
	}
	return w
}

// portSet reads a comma-separated annotation value.
func portSet(list string) map[string]bool {
	set := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			set[p] = true
		}
	}
	return set
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
