package kube

import (
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
)

// selectable reports whether a pod may receive traffic: it has an IP, is
// Running and Ready, and is not terminating. A terminating pod can still be
// Ready for its grace period; it is dropped at once because its model
// server is about to go away with whatever it holds in cache.
func selectable(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	c := readyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

func readyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// backendOf turns a selectable pod into a Backend of sel. It reports false
// when the pod is not selectable, has no port named sel.PortName, or (when
// groupLabel is set) lacks the group label: a PD pod outside any group
// could only form a pair across groups, which is never allowed, so it is
// left out rather than pooled into an implicit "" group.
func backendOf(pod *corev1.Pod, sel config.KubeSelector, groupLabel string) (discovery.Backend, bool) {
	if !selectable(pod) {
		return discovery.Backend{}, false
	}
	port := sel.Port
	if sel.PortName != "" {
		port = namedPort(pod, sel.PortName)
	}
	if port <= 0 || port > 65535 {
		return discovery.Backend{}, false
	}
	var group string
	if groupLabel != "" {
		g, ok := pod.Labels[groupLabel]
		if !ok || g == "" {
			return discovery.Backend{}, false
		}
		group = g
	}
	name := pod.Namespace + "/" + pod.Name
	return discovery.Backend{
		ID:    name + "/" + string(pod.UID),
		Name:  name,
		Addr:  net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)),
		Group: group,
		Since: since(pod, port),
	}, true
}

// namedPort finds a container port by name, in init containers too, where
// native sidecars (restartPolicy: Always) declare theirs.
func namedPort(pod *corev1.Pod, name string) int {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.Name == name {
					return int(p.ContainerPort)
				}
			}
		}
	}
	return 0
}

// since is when the pod's model server began its current run: the latest
// state.running.startedAt of its serving containers (those that declare
// port; every app container when none does), which the kubelet writes
// and every replica reads identically from the API. A container restart
// (its restartCount goes up, startedAt moves) means a cold cache, so a
// binding made before since is stale; a recreated pod has a new UID and
// so is another backend altogether. A readiness blip (NotReady and Ready
// again, probes timing out under load) moves neither, so the sessions the
// server still holds in its cache keep their pins, as Kthena's do; while
// the pod is not ready it is not selectable, and a turn in that window
// rebinds.
//
// The API stores startedAt at one-second precision, truncated: a binding
// made in the second of a restart but before it may survive the restart.
// Rounding up instead would invalidate fresh bindings on every newly
// started pod, which moves live sessions: the lesser evil is the rare
// survivor. Without a running container status (a pod written by hand)
// the pod's creation time is the bound.
func since(pod *corev1.Pod, port int) time.Time {
	serving := servingContainers(pod, port)
	var t time.Time
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, cs := range list {
			if r := cs.State.Running; r != nil && serving[cs.Name] && r.StartedAt.After(t) {
				t = r.StartedAt.Time
			}
		}
	}
	if t.IsZero() {
		return pod.CreationTimestamp.Time
	}
	return t
}

// servingContainers names the containers that declare port, in init
// containers too (a native sidecar may serve it); every app container
// when none declares it (a container port is informational in Kubernetes).
func servingContainers(pod *corev1.Pod, port int) map[string]bool {
	names := map[string]bool{}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if int(p.ContainerPort) == port {
					names[c.Name] = true
				}
			}
		}
	}
	if len(names) == 0 {
		for _, c := range pod.Spec.Containers {
			names[c.Name] = true
		}
	}
	return names
}
