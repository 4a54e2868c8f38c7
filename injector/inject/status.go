package inject

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// SkipReason says why a pod was returned unchanged. The values are metric
// labels (tether_injector_admissions_total{result}) and appear in logs.
type SkipReason string

// Skip reasons.
const (
	SkipOptedOut        SkipReason = "opted_out"        // tether.dev/inject: "false"
	SkipAlreadyInjected SkipReason = "already_injected" // status annotation of this version, or a tether-sidecar container
	SkipHostNetwork     SkipReason = "host_network"     // the sidecar's ports would be the node's
	SkipNotSelected     SkipReason = "not_selected"     // opt-in webhook, but the pod did not opt in
	SkipNoAnnotations   SkipReason = "no_annotations"   // labelled namespace, but the pod asks for nothing
	SkipExcludedNS      SkipReason = "excluded_namespace"
)

// SkipReasons lists every skip reason, for metrics that show each from the start.
var SkipReasons = []SkipReason{
	SkipOptedOut, SkipAlreadyInjected, SkipHostNetwork, SkipNotSelected, SkipNoAnnotations, SkipExcludedNS,
}

// Status is the tether.dev/status annotation: what this injector added,
// so a reinvocation leaves the pod alone and a newer injector can strip
// exactly this and render again.
type Status struct {
	Version    string   `json:"version"`
	Native     bool     `json:"native"`
	Containers []string `json:"containers"`
	Volumes    []string `json:"volumes,omitempty"`
	// Annotations the injector added (Prometheus' scrape annotations).
	Annotations []string `json:"annotations,omitempty"`
}

func (s Status) String() string {
	b, _ := json.Marshal(s) // a struct of strings and bools always marshals
	return string(b)
}

// readStatus returns the pod's status annotation, or nil when absent or
// unreadable (an unreadable status is not ours to trust).
func readStatus(pod *corev1.Pod) *Status {
	v, ok := pod.Annotations[AnnotationStatus]
	if !ok {
		return nil
	}
	var s Status
	if err := json.Unmarshal([]byte(v), &s); err != nil || len(s.Containers) == 0 {
		return nil
	}
	return &s
}

// strip removes what a previous injection recorded in st.
func strip(pod *corev1.Pod, st *Status) {
	drop := func(c corev1.Container) bool { return slices.Contains(st.Containers, c.Name) }
	pod.Spec.InitContainers = slices.DeleteFunc(pod.Spec.InitContainers, drop)
	pod.Spec.Containers = slices.DeleteFunc(pod.Spec.Containers, drop)
	pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return slices.Contains(st.Volumes, v.Name)
	})
	if len(pod.Spec.InitContainers) == 0 {
		pod.Spec.InitContainers = nil
	}
	if len(pod.Spec.Volumes) == 0 {
		pod.Spec.Volumes = nil
	}
	for _, k := range st.Annotations {
		delete(pod.Annotations, k)
	}
	delete(pod.Annotations, AnnotationStatus)
	for _, k := range injectorLabels {
		delete(pod.Labels, k)
	}
}

// hasContainer reports whether any container or init container is named name.
func hasContainer(pod *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}
