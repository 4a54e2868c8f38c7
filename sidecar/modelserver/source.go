package modelserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/discovery/kube"
	"github.com/tetherproxy/tether/sidecar/resolve"
)

// ErrUnavailable is wrapped by the error a pool fails requests with while
// it has no usable ModelServer.
var ErrUnavailable = resolve.ErrUnavailable

// Options wire a Source.
type Options struct {
	// Pool is the pool's name, for logs.
	Pool string
	// Ref is the ModelServer; an empty namespace is the sidecar's own.
	Ref config.ModelServerRef
	// Namespace is the sidecar's own (POD_NAMESPACE).
	Namespace string
	Dynamic   dynamic.Interface
	Kube      kubernetes.Interface
	// Keys builds the session-key extractor of a sessionSticky block.
	Keys func(*config.SessionSticky) resolve.Extractor
	// HaveJWT and HaveTokens say whether the sidecar can verify JWTClaim
	// sources (a jwt block) and Token sources (the pool's sessionToken).
	HaveJWT, HaveTokens bool
	// Reg receives the source's metrics, already labelled with the pool.
	Reg prometheus.Registerer
	Log *slog.Logger
}

// Source follows one ModelServer. It is the pool's discovery.Source (the
// pods the object selects now) and its resolve.Policy (the object's
// sessionSticky and timeout), and knows the object's model. All three
// change together: a request sees one version of the object whole.
type Source struct {
	o      Options
	ref    string // namespace/name, for logs and errors
	state  atomic.Pointer[state]
	synced atomic.Bool
	m      sourceMetrics

	// pending is the latest object the informer delivered (nil: deleted),
	// applied by Run's single loop; wake says there is one.
	mu      sync.Mutex
	pending *unstructured.Unstructured
	changed bool
	wake    chan struct{}
	// applied is the resourceVersion of the version applied last (Run's
	// loop only): the informer's add event repeats the listed object.
	applied string
}

// state is one applied version of the object.
type state struct {
	def    *Definition // nil while the pool is down
	inner  *innerSource
	policy resolve.Policy
	// model is the last applied version's model, kept while the pool is
	// down so that its requests get the pool's 503, which says why, and
	// not a shared listener's 404.
	model string
}

// innerSource is the pod discovery of one version's backends.
type innerSource struct {
	src  *kube.Source
	stop context.CancelFunc
	done chan struct{}
}

var (
	_ discovery.Source = (*Source)(nil)
	// empty is the Set of a pool without backends (down, or not yet synced).
	empty = discovery.NewSet(nil, nil)
)

// New prepares a Source; nothing talks to the API until Run.
func New(o Options) (*Source, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Ref.Namespace == "" {
		o.Ref.Namespace = o.Namespace
	}
	if o.Ref.Namespace == "" {
		return nil, fmt.Errorf("modelServer %q has no namespace and POD_NAMESPACE is not set", o.Ref.Name)
	}
	if o.Dynamic == nil || o.Kube == nil {
		return nil, errors.New("modelServer: a Kubernetes client is required")
	}
	s := &Source{o: o, ref: o.Ref.String(), wake: make(chan struct{}, 1)}
	s.state.Store(&state{policy: resolve.Policy{Down: s.downErr("is not synced yet")}})
	if err := s.m.register(o.Reg, s); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Source) downErr(why string) error {
	return fmt.Errorf("%w: ModelServer %s %s", ErrUnavailable, s.ref, why)
}

// Current is the Set of the pods the object selects now; empty while the
// pool is down.
func (s *Source) Current() *discovery.Set {
	if in := s.state.Load().inner; in != nil {
		return in.src.Current()
	}
	return empty
}

// Synced reports whether the object has been read once (found and its
// pods listed, or found absent).
func (s *Source) Synced() bool { return s.synced.Load() }

// Policy is the pool's policy now: for resolve.Options.Policy.
func (s *Source) Policy() resolve.Policy { return s.state.Load().policy }

// Serves reports whether model is the object's spec.model (the last one
// applied, while the pool is down): for proxy.Pool.Serves.
func (s *Source) Serves(model string) bool {
	m := s.state.Load().model
	return m != "" && m == model
}

// Definition is the applied version of the object; nil while down.
func (s *Source) Definition() *Definition { return s.state.Load().def }

// Run follows the object until ctx ends: one informer on the object's
// name, one loop that applies each version in order. It returns after
// every informer it started has stopped.
func (s *Source) Run(ctx context.Context) error {
	name := s.o.Ref.Name
	inf := dynamicinformer.NewFilteredDynamicInformer(s.o.Dynamic, GVR, s.o.Ref.Namespace, 0, cache.Indexers{},
		func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	deliver := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetName() != name {
			return
		}
		if deleted {
			u = nil
		}
		s.offer(u)
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { deliver(o, false) },
		UpdateFunc: func(_, o any) { deliver(o, false) },
		DeleteFunc: func(o any) { deliver(o, true) },
	}); err != nil {
		return fmt.Errorf("modelServer %s: %w", s.ref, err)
	}
	stopInformer := make(chan struct{})
	informerDone := make(chan struct{})
	go func() { defer close(informerDone); inf.Informer().Run(stopInformer) }()
	defer func() {
		close(stopInformer)
		<-informerDone
		s.stopInner(s.state.Load().inner)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil // only an ended ctx stops the wait
	}
	// The first version: the object as listed, or its absence.
	var first *unstructured.Unstructured
	if obj, ok, _ := inf.Informer().GetStore().GetByKey(s.o.Ref.Namespace + "/" + name); ok {
		first, _ = obj.(*unstructured.Unstructured)
	}
	s.apply(ctx, first)
	s.synced.Store(true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
			if obj, ok := s.take(); ok {
				s.apply(ctx, obj)
			}
		}
	}
}

// offer records the latest version for the loop (versions in between are
// skipped: only the newest one matters).
func (s *Source) offer(u *unstructured.Unstructured) {
	s.mu.Lock()
	s.pending, s.changed = u, true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Source) take() (*unstructured.Unstructured, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.pending, s.changed
	s.pending, s.changed = nil, false
	return u, ok
}

// apply makes obj (nil: deleted) the pool's definition. A version that
// selects other pods gets its own pod discovery, which replaces the old
// one only once it has listed them, so sessions never see an empty pool
// in between. An invalid version is refused and the previous one kept.
func (s *Source) apply(ctx context.Context, obj *unstructured.Unstructured) {
	log := s.o.Log.With("pool", s.o.Pool, "modelServer", s.ref)
	old := s.state.Load()
	if obj != nil && obj.GetResourceVersion() != "" && obj.GetResourceVersion() == s.applied {
		return
	}
	s.applied = ""
	if obj != nil {
		s.applied = obj.GetResourceVersion()
	}
	if obj == nil {
		// The log line comes first: whoever sees the 503 finds it.
		log.Warn("ModelServer not found: the pool answers 503 until it exists again")
		s.m.event(eventDeleted)
		s.publish(&state{model: old.model, policy: resolve.Policy{Down: s.downErr("does not exist (deleted, or not created yet)")}})
		s.stopInner(old.inner)
		return
	}
	def, err := s.parse(obj)
	if err != nil {
		// The log line comes first, as for a deletion.
		if old.def != nil {
			log.Error("ModelServer edit refused, keeping the previous version", "generation", obj.GetGeneration(), "err", err)
			s.m.event(eventInvalid)
			return
		}
		log.Error("ModelServer is invalid: the pool answers 503 until it is fixed", "generation", obj.GetGeneration(), "err", err)
		s.m.event(eventInvalid)
		s.publish(&state{model: old.model, policy: resolve.Policy{Down: s.downErr("is invalid: " + err.Error())}})
		s.stopInner(old.inner)
		return
	}
	inner := old.inner
	if inner == nil || !reflect.DeepEqual(old.def.Backends, def.Backends) {
		if inner, err = s.startInner(ctx, def.Backends); err != nil {
			log.Error("ModelServer backends cannot be watched", "err", err)
			s.m.event(eventInvalid)
			return
		}
		if inner == nil {
			return // ctx ended while listing pods
		}
	}
	s.publish(&state{def: def, inner: inner, policy: s.policyOf(def), model: def.Model})
	if inner != old.inner {
		s.stopInner(old.inner)
	}
	s.m.event(eventApplied)
	attrs := []any{"generation", obj.GetGeneration(), "model", def.Model, "timeout", def.Timeout, "sticky", def.Sticky != nil}
	if b := def.Backends; b.Kubernetes != nil {
		attrs = append(attrs, "selector", b.Kubernetes.Selector, "port", b.Kubernetes.Port)
	} else {
		attrs = append(attrs, "prefill", b.Prefill.Selector, "decode", b.Decode.Selector, "groupLabel", b.GroupLabel, "port", b.Decode.Port)
	}
	if def.Sticky != nil {
		attrs = append(attrs, "ttl", def.Sticky.TTL(), "sources", len(def.Sticky.Sources))
	}
	log.Info("ModelServer applied", attrs...)
}

// parse reads obj and checks its sessionSticky with the config's rules.
func (s *Source) parse(obj *unstructured.Unstructured) (*Definition, error) {
	def, err := Parse(obj)
	if err != nil {
		return nil, err
	}
	if def.Sticky != nil {
		if err := def.Sticky.Validate("spec.trafficPolicy.sessionSticky", s.o.HaveJWT, s.o.HaveTokens); err != nil {
			return nil, err
		}
	}
	return def, nil
}

func (s *Source) policyOf(def *Definition) resolve.Policy {
	p := resolve.Policy{Timeout: def.Timeout, PD: def.Backends.IsPD()}
	if def.Sticky != nil {
		p.Keys, p.TTL = s.o.Keys(def.Sticky), def.Sticky.TTL()
	}
	return p
}

func (s *Source) publish(st *state) {
	s.state.Store(st)
	s.m.setAvailable(st.def != nil)
}

// startInner starts pod discovery for b and waits until it has listed
// the pods; nil without error when ctx ended first.
func (s *Source) startInner(ctx context.Context, b config.Backends) (*innerSource, error) {
	src, err := kube.NewSource(s.o.Kube, b, s.o.Ref.Namespace, nil, s.o.Log.With("pool", s.o.Pool))
	if err != nil {
		return nil, err
	}
	ictx, stop := context.WithCancel(ctx)
	in := &innerSource{src: src, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		if err := src.Run(ictx); err != nil {
			s.o.Log.Error("ModelServer pod discovery stopped", "pool", s.o.Pool, "err", err)
		}
	}()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !src.Synced() {
		select {
		case <-ctx.Done():
			s.stopInner(in)
			return nil, nil
		case <-in.done:
			return nil, errors.New("pod discovery stopped before it synced")
		case <-t.C:
		}
	}
	return in, nil
}

func (s *Source) stopInner(in *innerSource) {
	if in != nil {
		in.stop()
		<-in.done
	}
}
