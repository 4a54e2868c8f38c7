package inject

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/tetherproxy/tether/sidecar/config"
)

// sidecarPort is one port the sidecar binds and the annotation that moves it.
type sidecarPort struct {
	port int
	key  string
	what string
}

// sidecarPorts are the ports the plan binds: the listen port only when
// the injector renders the config (a ConfigMap config names its own), the
// gossip port only with the gossip store.
func sidecarPorts(pl *plan) []sidecarPort {
	var ps []sidecarPort
	if pl.cfg != nil {
		ps = append(ps, sidecarPort{pl.listenPort, AnnotationListenPort, "listen"},
			sidecarPort{pl.debugPort, AnnotationDebugPort, "debug"})
	}
	ps = append(ps, sidecarPort{pl.adminPort, AnnotationAdminPort, "admin"})
	if pl.store == config.StoreGossip {
		ps = append(ps, sidecarPort{pl.gossipPort, AnnotationGossipPort, "gossip"})
	}
	return ps
}

// conflicts finds names and ports the pod already uses: the sidecar's
// ports must differ from each other, from every port a container of the
// pod declares, and from the ports of a mesh proxy in the pod. Each
// problem names the annotation that moves the port.
func conflicts(pod *corev1.Pod, pl *plan, a *Annotations) problems {
	var p problems
	for _, v := range pod.Spec.Volumes {
		for _, ours := range sidecarVolumes(pl) {
			if v.Name == ours.Name {
				p.add(AnnotationInject, "the pod already has a volume named %q, which the sidecar needs", v.Name)
			}
		}
	}
	ports := sidecarPorts(pl)
	for i, sp := range ports {
		for _, other := range ports[:i] {
			if sp.port != other.port {
				continue
			}
			// Blame the port that was moved onto the other.
			key, with := sp.key, other
			if !a.Has(sp.key) {
				key, with = other.key, sp
			}
			p.add(key, "port %d is also the sidecar's %s port (%s)", sp.port, with.what, with.key)
		}
		if what, proxy := meshPortOwner(pod, int32(sp.port)); what != "" {
			p.add(sp.key, "port %d (the sidecar's %s port) is %s, and the pod has %s; set %s to another port", sp.port, sp.what, what, proxy, sp.key)
		}
		for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range list {
				for _, cp := range c.Ports {
					if int(cp.ContainerPort) == sp.port {
						p.add(sp.key, "container %q already uses port %d, the sidecar's %s port; set %s to another port", c.Name, sp.port, sp.what, sp.key)
					}
				}
			}
		}
	}
	return p
}
