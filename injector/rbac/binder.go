// Package rbac lets the sidecars of a labelled namespace watch pods, and
// nobody else: for each namespace labelled tether.dev/injection=enabled
// that runs injected pods (label tether.dev/injected=true), it keeps one
// RoleBinding of the chart's sidecar ClusterRole (get/list/watch pods) to
// the service accounts those pods run as. It removes the binding when the
// label or the last injected pod goes. Labelling a namespace is then all
// a user does, and another service account of the namespace gains nothing.
// Read access to Kthena ModelServers is a second ClusterRole, bound the
// same way but only to the accounts of injected pods that name a
// ModelServer (annotation tether.dev/model-server), so no other sidecar
// can read them.
//
// The Binder touches only RoleBindings it owns: named BindingName (or
// ModelServerBindingName) and labelled
// app.kubernetes.io/managed-by=tether-injector. It watches only those names
// (field selectors, so RBAC can grant list and watch by resourceNames),
// and leaves a RoleBinding of such a name without its label alone.
package rbac

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Label values the Binder uses.
const (
	NamespaceLabel      = "tether.dev/injection"
	NamespaceLabelValue = "enabled"
	// InjectedLabel is set by the injector on every pod it injected.
	InjectedLabel      = "tether.dev/injected"
	InjectedLabelValue = "true"
	ManagedByLabel     = "app.kubernetes.io/managed-by"
	ManagedByValue     = "tether-injector"
	DefaultBindingName = "tether-sidecar"
	// ModelServerAnnotation is the injector's tether.dev/model-server: a
	// pod carrying it reads a ModelServer.
	ModelServerAnnotation = "tether.dev/model-server"
	// DefaultModelServerBindingName is the RoleBinding of the ModelServer
	// ClusterRole.
	DefaultModelServerBindingName = "tether-sidecar-modelservers"
)

// Binder reconciles one RoleBinding per namespace.
type Binder struct {
	Client      kubernetes.Interface
	ClusterRole string // the sidecar's ClusterRole (get/list/watch pods)
	BindingName string // default DefaultBindingName
	Log         *slog.Logger
	// Resync re-checks every namespace periodically (default 10m), which
	// repairs bindings edited by hand.
	Resync time.Duration
	// ModelServerClusterRole (get/list/watch modelservers) is bound only
	// to the accounts of pods annotated tether.dev/model-server, with
	// RoleBinding ModelServerBindingName (default
	// DefaultModelServerBindingName); "" binds it nowhere.
	ModelServerClusterRole string
	ModelServerBindingName string
}

// grant is one RoleBinding the Binder keeps in each namespace.
type grant struct {
	name, role string
	// wants reports whether a pod's service account belongs in it.
	wants func(*corev1.Pod) bool
	// get reads the namespace's binding from the informer's cache.
	get func(ns, name string) (*rbacv1.RoleBinding, error)
}

// grants are the bindings to keep: the pod readers, and the ModelServer
// readers when that role is set.
func (b *Binder) grants() []*grant {
	gs := []*grant{{name: b.BindingName, role: b.ClusterRole, wants: func(*corev1.Pod) bool { return true }}}
	if b.ModelServerClusterRole != "" {
		gs = append(gs, &grant{name: b.ModelServerBindingName, role: b.ModelServerClusterRole, wants: func(p *corev1.Pod) bool {
			_, ok := p.Annotations[ModelServerAnnotation]
			return ok
		}})
	}
	return gs
}

// Run reconciles until ctx is done. It returns once its informers and
// worker have stopped, or an error if the informers never synced.
func (b *Binder) Run(ctx context.Context) error {
	b.BindingName = cmp.Or(b.BindingName, DefaultBindingName)
	b.ModelServerBindingName = cmp.Or(b.ModelServerBindingName, DefaultModelServerBindingName)
	resync := cmp.Or(b.Resync, 10*time.Minute)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "tether-rbac"})
	defer queue.ShutDown()

	nsFactory := informers.NewSharedInformerFactory(b.Client, resync)
	grants := b.grants()
	// One RoleBinding informer per name: a field selector matches one.
	var rbFactories []informers.SharedInformerFactory
	var rbInfs []cache.SharedIndexInformer
	for _, g := range grants {
		f := informers.NewSharedInformerFactoryWithOptions(b.Client, resync,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", g.name).String()
				o.LabelSelector = ManagedByLabel + "=" + ManagedByValue
			}))
		inf := f.Rbac().V1().RoleBindings()
		g.get = func(ns, name string) (*rbacv1.RoleBinding, error) { return inf.Lister().RoleBindings(ns).Get(name) }
		rbFactories = append(rbFactories, f)
		rbInfs = append(rbInfs, inf.Informer())
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(b.Client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = InjectedLabel + "=" + InjectedLabelValue
		}),
		// Only the namespace and service account of a pod matter here:
		// keep the cache small whatever the pods hold.
		informers.WithTransform(slimPod))
	nsInf := nsFactory.Core().V1().Namespaces()
	podInf := podFactory.Core().V1().Pods()
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			ns := m.GetNamespace()
			if ns == "" { // a Namespace object
				ns = m.GetName()
			}
			queue.Add(ns)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	}
	infs := append([]cache.SharedIndexInformer{nsInf.Informer(), podInf.Informer()}, rbInfs...)
	synced := make([]cache.InformerSynced, 0, len(infs))
	for _, inf := range infs {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
	}
	for _, f := range append([]informers.SharedInformerFactory{nsFactory, podFactory}, rbFactories...) {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("rbac: informers did not sync")
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ns, quit := queue.Get()
			if quit {
				return
			}
			var err error
			for _, g := range grants {
				err = errors.Join(err, b.reconcile(ctx, ns, nsInf.Lister().Get, podInf.Lister().Pods(ns).List, g))
			}
			if err != nil && ctx.Err() == nil {
				b.Log.Warn("rbac: reconcile failed, retrying", "namespace", ns, "err", err)
				queue.AddRateLimited(ns)
			} else {
				queue.Forget(ns)
			}
			queue.Done(ns)
		}
	}()
	<-ctx.Done()
	queue.ShutDown()
	<-done
	return nil
}

// slimPod keeps what the Binder reads of a pod.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{ServiceAccountName: p.Spec.ServiceAccountName},
	}
	if v, ok := p.Annotations[ModelServerAnnotation]; ok {
		slim.Annotations = map[string]string{ModelServerAnnotation: v}
	}
	return slim, nil
}

// Desired is the RoleBinding for namespace ns that lets the service
// accounts sas (sorted, no duplicates) watch pods.
func (b *Binder) Desired(ns string, sas []string) *rbacv1.RoleBinding {
	return desired(cmp.Or(b.BindingName, DefaultBindingName), b.ClusterRole, ns, sas)
}

func desired(name, role, ns string, sas []string) *rbacv1.RoleBinding {
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
		},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
	}
	for _, sa := range sas {
		rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns})
	}
	return rb
}

// serviceAccounts are the accounts the namespace's injected pods that
// want the grant run as. A pod the API server stored always has one (its
// ServiceAccount admission sets "default" when the spec names none).
func serviceAccounts(pods []*corev1.Pod, wants func(*corev1.Pod) bool) []string {
	var sas []string
	for _, p := range pods {
		if p.DeletionTimestamp != nil || !wants(p) {
			continue // terminating (its sidecar is on its way out), or not in this grant
		}
		sas = append(sas, cmp.Or(p.Spec.ServiceAccountName, "default"))
	}
	slices.Sort(sas)
	return slices.Compact(sas)
}

func (b *Binder) reconcile(ctx context.Context, ns string,
	getNS func(string) (*corev1.Namespace, error),
	listPods func(labels.Selector) ([]*corev1.Pod, error),
	g *grant) error {
	n, err := getNS(ns)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	labelled := err == nil && n.DeletionTimestamp == nil && n.Labels[NamespaceLabel] == NamespaceLabelValue
	var sas []string
	if labelled {
		pods, err := listPods(labels.Everything())
		if err != nil {
			return err
		}
		sas = serviceAccounts(pods, g.wants)
	}
	want := len(sas) > 0
	have, err := g.get(ns, g.name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	api := b.Client.RbacV1().RoleBindings(ns)
	d := desired(g.name, g.role, ns, sas)
	switch {
	case want && have == nil:
		_, err := api.Create(ctx, d, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return b.notOurs(ctx, ns, g.name)
		}
		if err == nil {
			b.Log.Info("rbac: sidecar RoleBinding created", "namespace", ns, "name", g.name, "serviceAccounts", sas)
		}
		return err
	case want:
		if reflect.DeepEqual(have.RoleRef, d.RoleRef) && reflect.DeepEqual(have.Subjects, d.Subjects) {
			return nil
		}
		if have.RoleRef != d.RoleRef {
			// roleRef is immutable: replace the binding.
			if err := api.Delete(ctx, g.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			_, err := api.Create(ctx, d, metav1.CreateOptions{})
			return err
		}
		up := have.DeepCopy()
		up.Subjects = d.Subjects
		if _, err := api.Update(ctx, up, metav1.UpdateOptions{}); err != nil {
			return err
		}
		b.Log.Info("rbac: sidecar RoleBinding updated", "namespace", ns, "name", g.name, "serviceAccounts", sas)
		return nil
	case have != nil:
		err := api.Delete(ctx, g.name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			b.Log.Info("rbac: sidecar RoleBinding removed", "namespace", ns, "name", g.name)
		}
		return err
	}
	return nil
}

// notOurs handles a Create that found the name taken: by another replica
// (or an informer that is behind), which the next event settles, or by a
// RoleBinding someone else made, which is left alone.
func (b *Binder) notOurs(ctx context.Context, ns, name string) error {
	rb, err := b.Client.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil // gone again, or unreadable: the next event retries
	}
	if rb.Labels[ManagedByLabel] != ManagedByValue {
		b.Log.Warn("rbac: a RoleBinding with the sidecar binding's name exists and is not managed by tether; leaving it alone",
			"namespace", ns, "name", name)
	}
	return nil
}
