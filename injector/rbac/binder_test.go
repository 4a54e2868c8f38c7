package rbac_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

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

func TestBinderFollowsTheLabel(t *testing.T) {
	client := fake.NewClientset(ns("llm", true), ns("other", false))
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
	testkit.Eventually(t, 10*time.Second, "binding in the labelled namespace", func() bool { return get("llm") != nil })
	rb := get("llm")
	if rb.RoleRef.Name != "tether-sidecar" || rb.RoleRef.Kind != "ClusterRole" ||
		len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "Group" || rb.Subjects[0].Name != "system:serviceaccounts:llm" {
		t.Fatalf("unexpected binding: %+v", rb)
	}
	if get("other") != nil {
		t.Fatal("binding in an unlabelled namespace")
	}

	// Label "other": it gets one. Unlabel "llm": its binding goes.
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns("other", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns("llm", false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "binding follows the label", func() bool { return get("other") != nil && get("llm") == nil })

	// A binding deleted by hand comes back.
	if err := client.RbacV1().RoleBindings("other").Delete(ctx, rbac.DefaultBindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "binding restored", func() bool { return get("other") != nil })

	// Subjects edited by hand are put back.
	edited := get("other")
	edited.Subjects = append(edited.Subjects, rbacv1.Subject{Kind: "User", Name: "mallory", APIGroup: rbacv1.GroupName})
	if _, err := client.RbacV1().RoleBindings("other").Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "subjects repaired", func() bool { rb := get("other"); return rb != nil && len(rb.Subjects) == 1 })
}
