// Package kube discovers a pool's backends from the Kubernetes API: one
// client-go shared informer per (namespace, label selector) watches the
// model-server pods, and every add, update or delete publishes a new
// immutable discovery.Set of the selectable ones. A pod that stops being
// selectable (not ready, terminating, deleted) is gone from the very next
// Set, so the resolver rebinds its sessions on their next turn; a pod
// recreated under the same name has a new UID and so is a new backend.
//
// The sidecar needs get/list/watch on pods in the backends' namespaces and
// nothing else.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
)

// Roles of a watched selector, also the values of the metric's role label.
const (
	RoleBackend = "backend" // the pods of a plain pool
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Source is a discovery.Source backed by pod informers.
type Source struct {
	log        *slog.Logger
	groupLabel string
	watches    []*podWatch
	selectable *prometheus.GaugeVec

	set    atomic.Pointer[discovery.Set]
	synced atomic.Bool
	mu     sync.Mutex // serialises rebuilds: informers call handlers concurrently
}

// podWatch is one selector's informer.
type podWatch struct {
	role     string
	sel      config.KubeSelector // Namespace resolved
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
}

var _ discovery.Source = (*Source)(nil)

// NewSource prepares informers for the pool's kubernetes backends (plain
// selector, or prefill and decode selectors). A selector without a
// namespace watches defaultNamespace (the sidecar's own, POD_NAMESPACE).
// Nothing talks to the API until Run.
//
// The gauge tether_backends_selectable{role} is registered on reg; a
// sidecar with several pools passes each Source a Registerer wrapped with
// its pool label (prometheus.WrapRegistererWith(prometheus.Labels{"pool":
// name}, reg)) so the series are told apart.
func NewSource(client kubernetes.Interface, b config.Backends, defaultNamespace string, reg prometheus.Registerer, log *slog.Logger) (*Source, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{
		log:        log,
		groupLabel: b.GroupLabel,
		selectable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_backends_selectable",
			Help: "Model-server pods that are selectable now (IP, Running, Ready, not terminating), by role.",
		}, []string{"role"}),
	}
	type roleSel struct {
		role string
		sel  *config.KubeSelector
	}
	var sels []roleSel
	switch {
	case b.Kubernetes != nil:
		sels = []roleSel{{RoleBackend, b.Kubernetes}}
		s.groupLabel = "" // groups mean nothing outside PD pools
	case b.IsPD():
		if b.Prefill == nil || b.Decode == nil {
			return nil, errors.New("kube discovery: a PD pool needs both prefill and decode selectors")
		}
		sels = []roleSel{{RolePrefill, b.Prefill}, {RoleDecode, b.Decode}}
	default:
		return nil, errors.New("kube discovery: the pool has no kubernetes, prefill or decode selector")
	}
	for _, rs := range sels {
		w, err := s.newWatch(client, rs.role, *rs.sel, defaultNamespace)
		if err != nil {
			return nil, err
		}
		s.watches = append(s.watches, w)
	}
	if reg != nil {
		if err := reg.Register(s.selectable); err != nil {
			return nil, fmt.Errorf("kube discovery: registering metrics: %w", err)
		}
	}
	// Current is never nil: empty until the first synced view.
	s.set.Store(discovery.NewSet(nil, nil))
	return s, nil
}

func (s *Source) newWatch(client kubernetes.Interface, role string, sel config.KubeSelector, defaultNamespace string) (*podWatch, error) {
	if sel.Namespace == "" {
		sel.Namespace = defaultNamespace
	}
	if sel.Namespace == "" {
		return nil, fmt.Errorf("kube discovery: %s selector %q has no namespace and POD_NAMESPACE is not set", role, sel.Selector)
	}
	if _, err := labels.Parse(sel.Selector); err != nil {
		return nil, fmt.Errorf("kube discovery: %s selector %q: %w", role, sel.Selector, err)
	}
	// Resync 0: a periodic resync would only replay the cache; every real
	// change arrives as a watch event.
	f := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(sel.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.Selector }),
		informers.WithTransform(slimPod),
	)
	inf := f.Core().V1().Pods().Informer()
	w := &podWatch{role: role, sel: sel, factory: f, informer: inf}
	changed := func(any) { s.rebuild() }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	}); err != nil {
		return nil, fmt.Errorf("kube discovery: %w", err)
	}
	return w, nil
}

// slimPod drops what discovery never reads, so a large fleet's cache stays small.
func slimPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		p.ManagedFields = nil
		p.Annotations = nil
		for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
			for i := range cs {
				cs[i].Env, cs[i].EnvFrom, cs[i].Args, cs[i].Command = nil, nil, nil, nil
				cs[i].VolumeMounts = nil
			}
		}
		p.Spec.Volumes = nil
	}
	return obj, nil
}

// Current is the latest Set; empty (never nil) until Synced.
func (s *Source) Current() *discovery.Set { return s.set.Load() }

// Synced reports whether every informer has its first complete list.
func (s *Source) Synced() bool { return s.synced.Load() }

// Run starts the informers, publishes the first complete Set once all of
// them have synced, and keeps publishing until ctx ends. It returns after
// the informers' goroutines have stopped.
func (s *Source) Run(ctx context.Context) error {
	var syncs []cache.InformerSynced
	for _, w := range s.watches {
		w.factory.Start(ctx.Done())
		syncs = append(syncs, w.informer.HasSynced)
	}
	defer func() {
		for _, w := range s.watches {
			w.factory.Shutdown()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		// Only an ended ctx stops the wait: informers retry API errors forever.
		return nil
	}
	// The first complete Set is published before Synced turns true, so a
	// reader that sees Synced (readiness) sees that Set, never the empty
	// one; under the lock, so no event between the two is lost.
	s.mu.Lock()
	s.publish()
	s.synced.Store(true)
	s.mu.Unlock()
	for _, w := range s.watches {
		s.log.Info("kubernetes discovery synced", "role", w.role, "namespace", w.sel.Namespace,
			"selector", w.sel.Selector, "selectable", s.count(w.role))
	}
	<-ctx.Done()
	return nil
}

// rebuild publishes a new Set from the informers' caches. Before the first
// complete sync it publishes nothing: a partial view would make bound pods
// look gone and move their sessions.
func (s *Source) rebuild() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.synced.Load() {
		s.publish()
	}
}

// publish builds and stores the Set; the caller holds s.mu.
func (s *Source) publish() {
	var backends, prefill []discovery.Backend
	for _, w := range s.watches {
		bs := s.backendsOf(w)
		s.selectable.WithLabelValues(w.role).Set(float64(len(bs)))
		if w.role == RolePrefill {
			prefill = bs
		} else {
			backends = bs
		}
	}
	s.set.Store(discovery.NewSet(backends, prefill))
}

// backendsOf lists a watch's selectable backends, ordered by ID so every
// replica sees the same order.
func (s *Source) backendsOf(w *podWatch) []discovery.Backend {
	objs := w.informer.GetStore().List()
	bs := make([]discovery.Backend, 0, len(objs))
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if b, ok := backendOf(pod, w.sel, s.groupLabel); ok {
			bs = append(bs, b)
		}
	}
	slices.SortFunc(bs, func(a, b discovery.Backend) int { return strings.Compare(a.ID, b.ID) })
	return bs
}

func (s *Source) count(role string) int {
	set := s.Current()
	if role == RolePrefill {
		return len(set.Prefill)
	}
	return len(set.Backends)
}
