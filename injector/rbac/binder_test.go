package rbac_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/rbac"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ns(name string, labelled bool) *corev1.Namespace {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if labelled {
		n.Labels = map[string]string{rbac.NamespaceLabel: rbac.NamespaceLabelValue}
	}
	return n
}

// pod is a stored pod running as service account sa; injected ones carry
// the injector's label.
func pod(ns, name, sa string, injected bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{ServiceAccountName: sa}}
	if injected {
		p.Labels = map[string]string{rbac.InjectedLabel: rbac.InjectedLabelValue}
	}
	return p
}

// The label the Binder selects on is the one the injector sets.
func TestLabelsMatchTheInjector(t *testing.T) {
	if rbac.InjectedLabel != inject.LabelInjected || rbac.NamespaceLabel != inject.NamespaceLabel ||
		rbac.NamespaceLabelValue != inject.NamespaceLabelValue {
		t.Fatal("rbac and inject disagree on label keys")
	}
}

func TestBinderBindsTheRoutersServiceAccounts(t *testing.T) {
	foreign := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "foreign", Name: rbac.DefaultBindingName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "alice", APIGroup: rbacv1.GroupName}},
	}
	client := fake.NewClientset(
		ns("llm", true), ns("other", false), ns("empty", true), ns("foreign", true),
		pod("llm", "router-0", "router", true), pod("llm", "model-0", "default", false),
		pod("other", "router-0", "router", true), pod("foreign", "router-0", "router", true),
		foreign)
	b := &rbac.Binder{Client: client, ClusterRole: "tether-sidecar", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	get := func(n string) *rbacv1.RoleBinding {
		rb, err := client.RbacV1().RoleBindings(n).Get(ctx, rbac.DefaultBindingName, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return rb
	}
	subjects := func(n string, sas ...string) func() bool {
		return func() bool {
			rb := get(n)
			if len(sas) == 0 {
				return rb == nil
			}
			if rb == nil || rb.RoleRef.Name != "tether-sidecar" || rb.RoleRef.Kind != "ClusterRole" || rb.Labels[rbac.ManagedByLabel] != rbac.ManagedByValue {
				return false
			}
			var want []rbacv1.Subject
			for _, sa := range sas {
				want = append(want, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: n})
			}
			return reflect.DeepEqual(rb.Subjects, want)
		}
	}
	pods := client.CoreV1().Pods

	// The router's own service account, not the namespace's group; not the
	// model server's, which was not injected.
	testkit.Eventually(t, 10*time.Second, "the router's account bound in llm", subjects("llm", "router"))
	if get("other") != nil || get("empty") != nil {
		t.Fatal("binding in an unlabelled namespace, or in one without injected pods")
	}

	// A second router with another account joins; the accounts follow the pods.
	if _, err := pods("llm").Create(ctx, pod("llm", "canary-0", "router-canary", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "both accounts bound", subjects("llm", "router", "router-canary"))
	if err := pods("llm").Delete(ctx, "router-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the gone router's account unbound", subjects("llm", "router-canary"))
	if err := pods("llm").Delete(ctx, "canary-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "no injected pod, no binding", subjects("llm"))

	// Label "other": it gets one. Unlabel it: the binding goes.
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns("other", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "binding follows the label", subjects("other", "router"))

	// A binding deleted by hand comes back; subjects edited by hand are put back.
	if err := client.RbacV1().RoleBindings("other").Delete(ctx, rbac.DefaultBindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "binding restored", subjects("other", "router"))
	edited := get("other")
	edited.Subjects = append(edited.Subjects, rbacv1.Subject{Kind: "User", Name: "mallory", APIGroup: rbacv1.GroupName})
	if _, err := client.RbacV1().RoleBindings("other").Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "subjects repaired", subjects("other", "router"))

	if _, err := client.CoreV1().Namespaces().Update(ctx, ns("other", false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "unlabelled: binding removed", subjects("other"))

	// A RoleBinding of that name that tether does not manage is left alone.
	if rb := get("foreign"); rb == nil || !reflect.DeepEqual(rb.Subjects, foreign.Subjects) || rb.RoleRef != foreign.RoleRef {
		t.Fatalf("a RoleBinding tether does not own was changed: %+v", rb)
	}
}

// TestBinderModelServerReaders: the ModelServer ClusterRole is bound only
// to the accounts of injected pods that name a ModelServer, in a binding
// of its own, and unbound when the last such pod goes; the pod readers'
// binding is unaffected.
func TestBinderModelServerReaders(t *testing.T) {
	withModelServer := func(p *corev1.Pod) *corev1.Pod {
		p.Annotations = map[string]string{rbac.ModelServerAnnotation: "deepseek"}
		return p
	}
	client := fake.NewClientset(ns("llm", true), ns("plain", true),
		withModelServer(pod("llm", "kthena-router-0", "kthena-router", true)),
		pod("llm", "router-0", "router", true),
		withModelServer(pod("llm", "not-injected", "model", false)),
		pod("plain", "router-0", "router", true))
	b := &rbac.Binder{Client: client, ClusterRole: "tether-sidecar", ModelServerClusterRole: "tether-sidecar-modelservers",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	bound := func(n, name, role string, sas ...string) func() error {
		return func() error {
			rb, err := client.RbacV1().RoleBindings(n).Get(ctx, name, metav1.GetOptions{})
			if len(sas) == 0 {
				if err == nil {
					return fmt.Errorf("%s/%s still exists", n, name)
				}
				return nil
			}
			if err != nil {
				return err
			}
			var want []rbacv1.Subject
			for _, sa := range sas {
				want = append(want, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: n})
			}
			if rb.RoleRef.Name != role || !reflect.DeepEqual(rb.Subjects, want) || rb.Labels[rbac.ManagedByLabel] != rbac.ManagedByValue {
				return fmt.Errorf("%s/%s = %+v %+v", n, name, rb.RoleRef, rb.Subjects)
			}
			return nil
		}
	}
	testkit.Eventually(t, 10*time.Second, "ModelServer readers in llm", bound("llm", rbac.DefaultModelServerBindingName, "tether-sidecar-modelservers", "kthena-router"))
	testkit.Eventually(t, 10*time.Second, "pod readers in llm", bound("llm", rbac.DefaultBindingName, "tether-sidecar", "kthena-router", "router"))
	testkit.Eventually(t, 10*time.Second, "pod readers in plain", bound("plain", rbac.DefaultBindingName, "tether-sidecar", "router"))
	if _, err := client.RbacV1().RoleBindings("plain").Get(ctx, rbac.DefaultModelServerBindingName, metav1.GetOptions{}); err == nil {
		t.Fatal("a namespace without ModelServer pods got the ModelServer binding")
	}
	if err := client.CoreV1().Pods("llm").Delete(ctx, "kthena-router-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "ModelServer binding gone with its last pod", bound("llm", rbac.DefaultModelServerBindingName, ""))
	testkit.Eventually(t, 10*time.Second, "pod readers follow", bound("llm", rbac.DefaultBindingName, "tether-sidecar", "router"))
}

func TestModelServerAnnotationMatchesTheInjector(t *testing.T) {
	if rbac.ModelServerAnnotation != inject.AnnotationModelServer {
		t.Fatal("rbac and inject disagree on the model-server annotation")
	}
}
