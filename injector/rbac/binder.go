// Package rbac lets the sidecars of a labelled namespace watch pods:
// for each namespace labelled tether.dev/injection=enabled it keeps a
// RoleBinding of the chart's sidecar ClusterRole (get/list/watch pods) to
// every service account of that namespace, and removes it when the label
// goes. Labelling a namespace is then all a user does.
package rbac

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Label values the Binder uses.
const (
	NamespaceLabel      = "tether.dev/injection"
	NamespaceLabelValue = "enabled"
	ManagedByLabel      = "app.kubernetes.io/managed-by"
	ManagedByValue      = "tether-injector"
	DefaultBindingName  = "tether-sidecar"
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
}

// Run reconciles until ctx is done. It returns once its informers and
// worker have stopped, or an error if the informers never synced.
func (b *Binder) Run(ctx context.Context) error {
	if b.BindingName == "" {
		b.BindingName = DefaultBindingName
	}
	resync := b.Resync
	if resync <= 0 {
		resync = 10 * time.Minute
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "tether-rbac"})
	defer queue.ShutDown()

	nsFactory := informers.NewSharedInformerFactory(b.Client, resync)
	rbFactory := informers.NewSharedInformerFactoryWithOptions(b.Client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = ManagedByLabel + "=" + ManagedByValue
		}))
	nsInf := nsFactory.Core().V1().Namespaces()
	rbInf := rbFactory.Rbac().V1().RoleBindings()
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, err := meta(obj); err == nil {
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
	if _, err := nsInf.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	if _, err := rbInf.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	nsFactory.Start(ctx.Done())
	rbFactory.Start(ctx.Done())
	defer nsFactory.Shutdown()
	defer rbFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nsInf.Informer().HasSynced, rbInf.Informer().HasSynced) {
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
			err := b.reconcile(ctx, ns, nsInf.Lister().Get, rbInf.Lister().RoleBindings(ns).Get)
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

func meta(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	return m, nil
}

// Desired is the RoleBinding for namespace ns.
func (b *Binder) Desired(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: b.BindingName, Namespace: ns,
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
		},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.ClusterRole},
		Subjects: []rbacv1.Subject{{
			APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:" + ns,
		}},
	}
}

func (b *Binder) reconcile(ctx context.Context, ns string,
	getNS func(string) (*corev1.Namespace, error), getRB func(string) (*rbacv1.RoleBinding, error)) error {
	n, err := getNS(ns)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	want := err == nil && n.DeletionTimestamp == nil && n.Labels[NamespaceLabel] == NamespaceLabelValue
	have, err := getRB(b.BindingName)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	api := b.Client.RbacV1().RoleBindings(ns)
	switch {
	case want && have == nil:
		_, err := api.Create(ctx, b.Desired(ns), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // another replica, or the informer is behind
		}
		if err == nil {
			b.Log.Info("rbac: sidecar RoleBinding created", "namespace", ns)
		}
		return err
	case want:
		d := b.Desired(ns)
		if reflect.DeepEqual(have.RoleRef, d.RoleRef) && reflect.DeepEqual(have.Subjects, d.Subjects) {
			return nil
		}
		if have.RoleRef != d.RoleRef {
			// roleRef is immutable: replace the binding.
			if err := api.Delete(ctx, b.BindingName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			_, err := api.Create(ctx, d, metav1.CreateOptions{})
			return err
		}
		up := have.DeepCopy()
		up.Subjects = d.Subjects
		_, err := api.Update(ctx, up, metav1.UpdateOptions{})
		return err
	case have != nil:
		err := api.Delete(ctx, b.BindingName, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			b.Log.Info("rbac: sidecar RoleBinding removed", "namespace", ns)
		}
		return err
	}
	return nil
}
