package inject

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherproxy/tether/sidecar/config"
)

// Options are the injector's defaults (chart values / injector flags).
// The zero value of every field but Image is usable.
type Options struct {
	// Image of the sidecar, repository:tag. Required.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	Resources       corev1.ResourceRequirements
	// PlainContainer puts the sidecar first in containers instead of a
	// native sidecar (an init container with restartPolicy Always), for
	// clusters older than Kubernetes 1.29.
	PlainContainer bool
	// PreStopSleep (plain containers only) keeps the sidecar serving this
	// long after the pod is asked to stop, while the router, stopped at
	// the same moment, drains; then SIGTERM gives in-flight requests
	// proxy.shutdownTimeout. Zero: no preStop hook.
	PreStopSleep time.Duration
	// Version is recorded in the status annotation; a pod injected by
	// another version is stripped and injected again.
	Version string
	// Store is the default store for pods without tether.dev/store.
	Store config.StoreBackend
	// RedisAddress (host:port, or several comma-separated for Cluster) is
	// used by redis-store pods without tether.dev/redis-address.
	RedisAddress string
	// RedisPasswordSecret and GossipKeySecret name Secrets (keys "password"
	// and "key") mounted into pods of that store unless the pod names its own.
	RedisPasswordSecret string
	GossipKeySecret     string
	// RedisUsername (ACL user) and RedisTLS apply to redis-store pods
	// without tether.dev/redis-username and tether.dev/redis-tls.
	RedisUsername string
	RedisTLS      bool
	// RedisCASecret names a Secret (key "ca.crt") whose CA verifies Redis's
	// certificate for redis-store pods with TLS on and without
	// tether.dev/redis-ca-secret.
	RedisCASecret string
	// ExcludedNamespaces are never injected (kube-system, the injector's own).
	ExcludedNamespaces []string
	// PrometheusScrape adds prometheus.io/scrape, port and path for the
	// sidecar's admin port to pods without tether.dev/prometheus-scrape.
	PrometheusScrape bool
}

// Injector applies Options to pods. It is safe for concurrent use.
type Injector struct {
	opts Options
}

// New checks the options and returns an Injector.
func New(o Options) (*Injector, error) {
	if o.Image == "" {
		return nil, fmt.Errorf("inject: the sidecar image is required")
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	switch o.Store {
	case "", config.StoreMemory, config.StoreGossip, config.StoreRedis:
	default:
		return nil, fmt.Errorf("inject: unknown default store %q (want memory, gossip or redis)", o.Store)
	}
	if o.RedisAddress != "" {
		var a Annotations
		if rule := parseRedisAddress(o.RedisAddress, &a, nil); rule != "" {
			return nil, fmt.Errorf("inject: default Redis address %s", rule)
		}
	}
	if o.RedisUsername != "" {
		var a Annotations
		if rule := parseRedisUsername(o.RedisUsername, &a, nil); rule != "" {
			return nil, fmt.Errorf("inject: default Redis username %s", rule)
		}
	}
	if o.PreStopSleep < 0 || o.PreStopSleep%time.Second != 0 {
		return nil, fmt.Errorf("inject: the preStop sleep must be whole seconds, 0 or more, got %s", o.PreStopSleep)
	}
	if l, ok := o.Resources.Limits[corev1.ResourceMemory]; ok && l.Value() < config.MinMemoryLimitBytes {
		return nil, fmt.Errorf("inject: the sidecar memory limit %s is below %s, the least the sidecar runs in", &l,
			resource.NewQuantity(config.MinMemoryLimitBytes, resource.BinarySI))
	}
	for _, s := range []string{o.RedisPasswordSecret, o.GossipKeySecret, o.RedisCASecret} {
		if s != "" && len(validation.IsDNS1123Subdomain(s)) > 0 {
			return nil, fmt.Errorf("inject: %q is not a valid Secret name", s)
		}
	}
	return &Injector{opts: o}, nil
}

// Request is what the admission request says beyond the pod itself.
type Request struct {
	// Namespace of the pod (at CREATE the pod's own field may be empty).
	Namespace string
	// NamespaceSelected is true when the pod came through the webhook
	// entry for labelled namespaces; false for the opt-in entry, where
	// only pods that opted in are injected.
	NamespaceSelected bool
}

// Result of Inject when the pod is not denied.
type Result struct {
	// Pod is the mutated pod, or nil when skipped.
	Pod *corev1.Pod
	// Skip is why the pod was left unchanged ("" when injected).
	Skip SkipReason
	// Warnings are shown to the user (kubectl prints them).
	Warnings []string
}

// Inject decides and, if the pod gets the sidecar, returns the mutated
// copy. The input pod is never modified. An error is a *Denial whose
// messages name the annotation at fault, or an internal error.
func (inj *Injector) Inject(in *corev1.Pod, req Request) (Result, error) {
	pod := in.DeepCopy()
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	if slices.Contains(inj.opts.ExcludedNamespaces, ns) {
		return Result{Skip: SkipExcludedNS}, nil
	}
	a, parseErr := ParseAnnotations(pod.Annotations)
	optedIn := pod.Labels[LabelInject] == "true" || (a.Inject != nil && *a.Inject)
	if pod.Labels[LabelInject] == "false" || (a.Inject != nil && !*a.Inject) {
		return Result{Skip: SkipOptedOut}, nil
	}
	if a.Has(AnnotationInject) && a.Inject == nil {
		return Result{}, parseErr // an unreadable opt-in/opt-out is never guessed
	}

	if st := readStatus(pod); st != nil {
		if st.Version == inj.opts.Version {
			return Result{Skip: SkipAlreadyInjected}, nil
		}
		strip(pod, st) // injected by another version: render again
	} else if hasContainer(pod, ContainerName) {
		return Result{Skip: SkipAlreadyInjected}, nil
	}

	switch {
	case !req.NamespaceSelected && !optedIn:
		return Result{Skip: SkipNotSelected}, nil
	case !optedIn && !a.configures():
		// A labelled namespace also holds model servers, Redis and the
		// like: pods that ask for nothing are left alone.
		return Result{Skip: SkipNoAnnotations}, nil
	case pod.Spec.HostNetwork:
		return Result{Skip: SkipHostNetwork, Warnings: []string{
			"tether: hostNetwork pods are not injected (the sidecar's ports would be the node's)"}}, nil
	}
	if parseErr != nil {
		return Result{}, parseErr
	}

	pl, p := inj.buildPlan(a, pod, ns)
	p = append(p, conflicts(pod, pl, a)...)
	if err := p.err(); err != nil {
		return Result{}, err
	}
	return inj.mutate(pod, pl)
}

// mutate adds the sidecar, its volumes, labels and the status annotation.
func (inj *Injector) mutate(pod *corev1.Pod, pl *plan) (Result, error) {
	var res Result
	c, err := inj.sidecarContainer(pl, serviceAccountTokenMount(pod))
	if err != nil {
		return res, err
	}
	if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
		res.Warnings = append(res.Warnings,
			"tether: automountServiceAccountToken is false, so the sidecar has no token to watch pods with")
	}
	res.Warnings = append(res.Warnings, meshWarnings(pod, pl)...)
	res.Warnings = append(res.Warnings, pl.warnings...)
	st := Status{Version: inj.opts.Version, Native: !inj.opts.PlainContainer, Containers: []string{ContainerName}}
	if inj.opts.PlainContainer {
		if pod.Annotations == nil || pod.Annotations[defaultContainerAnnotation] == "" {
			if len(pod.Spec.Containers) > 0 {
				setAnnotation(pod, defaultContainerAnnotation, pod.Spec.Containers[0].Name)
			}
		}
		// First, so the kubelet starts it before the app.
		pod.Spec.Containers = append([]corev1.Container{c}, pod.Spec.Containers...)
		if w := inj.ensureGracePeriod(pod, pl); w != "" {
			res.Warnings = append(res.Warnings, w)
		}
	} else {
		pod.Spec.InitContainers = slices.Insert(pod.Spec.InitContainers, sidecarIndex(pod), c)
	}
	for _, v := range sidecarVolumes(pl) {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v)
		st.Volumes = append(st.Volumes, v.Name)
	}
	if pl.scrape {
		st.Annotations = addScrapeAnnotations(pod, pl.adminPort)
	}
	setLabel(pod, LabelInjected, "true")
	if pl.store == config.StoreGossip {
		setLabel(pod, LabelGossipPort, strconv.Itoa(pl.gossipPort))
	}
	setAnnotation(pod, AnnotationStatus, st.String())
	res.Pod = pod
	return res, nil
}

// defaultContainerAnnotation keeps kubectl logs/exec on the app container
// when the sidecar is the first plain container.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

func setAnnotation(pod *corev1.Pod, k, v string) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[k] = v
}

func setLabel(pod *corev1.Pod, k, v string) {
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[k] = v
}

// serviceAccountTokenMount finds the token mount the API server gave the
// pod's containers, to give the sidecar the same.
func serviceAccountTokenMount(pod *corev1.Pod) *corev1.VolumeMount {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range list {
			for _, m := range c.VolumeMounts {
				if m.MountPath == serviceAccountMount {
					m := m
					return &m
				}
			}
		}
	}
	return nil
}

// Patch runs Inject and returns the JSONPatch that turns the pod into the
// mutated one (nil when skipped). Both sides are marshalled from the typed
// Pod, so fields this build of the API does not know are never touched.
func (inj *Injector) Patch(pod *corev1.Pod, req Request) ([]byte, Result, error) {
	res, err := inj.Inject(pod, req)
	if err != nil || res.Pod == nil {
		return nil, res, err
	}
	// jsonpatch diffs arrays index by index, so inserting the sidecar
	// would rewrite every container after it. Diff without it and send
	// the insertion as one "add" at its index.
	mid := res.Pod.DeepCopy()
	list, path := &mid.Spec.InitContainers, "/spec/initContainers"
	if inj.opts.PlainContainer {
		list, path = &mid.Spec.Containers, "/spec/containers"
	}
	at := slices.IndexFunc(*list, func(c corev1.Container) bool { return c.Name == ContainerName })
	if at < 0 {
		return nil, res, fmt.Errorf("inject: the mutated pod has no %s container", ContainerName)
	}
	sidecar := (*list)[at]
	if *list = slices.Delete(*list, at, at+1); len(*list) == 0 && path == "/spec/initContainers" {
		*list = nil
	}
	orig, err := json.Marshal(pod)
	if err != nil {
		return nil, res, fmt.Errorf("marshal pod: %w", err)
	}
	without, err := json.Marshal(mid)
	if err != nil {
		return nil, res, fmt.Errorf("marshal mutated pod: %w", err)
	}
	ops, err := jsonpatch.CreatePatch(orig, without)
	if err != nil {
		return nil, res, fmt.Errorf("create patch: %w", err)
	}
	if *list == nil {
		ops = append(ops, jsonpatch.NewOperation("add", path, []corev1.Container{sidecar}))
	} else {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/"+strconv.Itoa(at), sidecar))
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, res, fmt.Errorf("marshal patch: %w", err)
	}
	return b, res, nil
}
