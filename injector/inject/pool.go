package inject

import (
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// perPodLabels differ between replicas of one router (or between the old
// and new revision during a rollout), so they must not be part of the
// selector that finds gossip peers: every replica and both revisions share
// one ring.
var perPodLabels = map[string]bool{
	"pod-template-hash":                        true, // Deployment revision
	"controller-revision-hash":                 true, // StatefulSet, DaemonSet revision
	"statefulset.kubernetes.io/pod-name":       true,
	"apps.kubernetes.io/pod-index":             true,
	"batch.kubernetes.io/job-completion-index": true,
	"controller-uid":                           true,
	"batch.kubernetes.io/controller-uid":       true,
}

// PoolName is the pool identity the sidecar keys bindings by:
// "<namespace>/<name>", where name is, in order, the tether.dev/pool
// annotation, the app.kubernetes.io/name label, the app label, or the
// name of the pod's owner derived from generateName ("router-7d9f8-" of a
// Deployment gives "router"). Every replica of one router derives the same
// name, which is what makes them share bindings. It returns "" when no name
// can be derived.
func PoolName(pod *corev1.Pod, namespace, annotated string) string {
	name := annotated
	for _, k := range []string{"app.kubernetes.io/name", "app"} {
		if name == "" {
			name = pod.Labels[k]
		}
	}
	if name == "" {
		name = ownerPrefix(pod)
	}
	if name == "" {
		return ""
	}
	return namespace + "/" + name
}

var ordinal = regexp.MustCompile(`-[0-9]+$`)

// ownerPrefix derives the owning workload's name from the pod's name.
func ownerPrefix(pod *corev1.Pod) string {
	if g := strings.TrimSuffix(pod.GenerateName, "-"); g != "" {
		// A Deployment's ReplicaSet is named <deployment>-<pod-template-hash>.
		if h := pod.Labels["pod-template-hash"]; h != "" {
			g = strings.TrimSuffix(g, "-"+h)
		}
		return g
	}
	// StatefulSet pods are named <set>-<ordinal> with no generateName.
	if _, ok := pod.Labels["statefulset.kubernetes.io/pod-name"]; ok {
		return ordinal.ReplaceAllString(pod.Name, "")
	}
	return pod.Name
}

// PeerSelector is the label selector that finds this router's other
// replicas: the pod's labels minus per-pod ones and the injector's own. It returns "" when
// nothing is left to select on.
func PeerSelector(pod *corev1.Pod) string {
	set := labels.Set{}
	for k, v := range pod.Labels {
		if !perPodLabels[k] && !slices.Contains(injectorLabels, k) &&
			len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0 {
			set[k] = v
		}
	}
	if len(set) == 0 {
		return ""
	}
	// SelectorFromSet sorts by key, so the rendering is stable.
	return labels.SelectorFromSet(set).String()
}
