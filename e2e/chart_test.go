//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/tetherproxy/tether/e2e/cluster"
	"github.com/tetherproxy/tether/injector/rbac"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// The Helm chart on the real API server: scenario 10 applies it and checks
// the RBAC it grants; scenario 9 (injector_test.go) runs the injector as
// the chart deploys it and serves its webhook to the API server.

const (
	chartRelease   = "tether"
	chartNamespace = "tether-system"
	// Names the default release renders (charts/tether/templates/_helpers.tpl).
	injectorName = "tether-injector"
	sidecarRole  = "tether-sidecar"
	// modelServerRole is the chart's ClusterRole (and RoleBinding name)
	// for reading ModelServers.
	modelServerRole = "tether-sidecar-modelservers"
)

// helmBinary is $TETHER_HELM (exported by the Makefile); the test fails,
// never skips, when it is missing.
func helmBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("TETHER_HELM")
	if p == "" {
		t.Fatal("TETHER_HELM is not set: run make helm (make e2e exports it)")
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		t.Fatalf("helm not found at %s ($TETHER_HELM): run make helm", p)
	}
	return p
}

// renderChart is `helm template` of charts/tether into the release
// namespace, decoded document by document.
func renderChart(t *testing.T, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", chartRelease, filepath.Join(cluster.RepoRoot(t), "charts", "tether"), "--namespace", chartNamespace}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the rendered chart: %v", err)
		}
		if len(m) == 0 { // an empty document (a template that rendered nothing)
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	if len(objs) == 0 {
		t.Fatal("the chart rendered no objects")
	}
	return objs
}

// applyChart creates the release namespace and every rendered object, as
// `helm template | kubectl create -f -` would: the dynamic client, with
// kinds mapped to resources through the API server's own discovery. Any
// object the API server rejects fails the test.
func applyChart(t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	c.CreateNamespace(t, chartNamespace, nil)
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: no such kind on this API server: %v", gvk, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if o.GetNamespace() == "" {
				o.SetNamespace(chartNamespace)
			}
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("create %s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
}

// findObject returns the rendered object of that kind and name.
func findObject(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the chart rendered no %s %s", kind, name)
	return nil
}

// injector is a tether-injector process.
type injector struct {
	*cluster.Process
	webhook string // host:port of the TLS webhook
	admin   string
}

// startInjector runs tether-injector (from its image: cluster.Binary)
// with the arguments of the chart's Deployment, authenticated as the
// chart's service account (so it has exactly the chart's RBAC), listening
// on loopback, with 127.0.0.1 in its self-managed serving certificate for
// a URL client config. It waits for /readyz: a serving certificate stored
// in the chart's Secret. webhook is its TLS address (host:port on
// 127.0.0.1).
func startInjector(t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured, webhook string) *injector {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(findObject(t, objs, "Deployment", injectorName).Object, &d); err != nil {
		t.Fatal(err)
	}
	ct := d.Spec.Template.Spec.Containers[0]
	admin := cluster.FreeAddr(t, "127.0.0.1")
	var args []string
	for _, a := range ct.Args {
		switch {
		case strings.HasPrefix(a, "--listen="):
			a = "--listen=" + webhook
		case strings.HasPrefix(a, "--admin-listen="):
			a = "--admin-listen=" + admin
		}
		// The kubelet expands $(VAR) from the container's env.
		args = append(args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", chartNamespace))
	}
	args = append(args, "--extra-san=127.0.0.1",
		"--kubeconfig="+c.ServiceAccountKubeconfig(t, chartNamespace, d.Spec.Template.Spec.ServiceAccountName))
	p := cluster.StartProcess(t, "tether-injector", cluster.Binary(t, "tether-injector"), args, []string{"POD_NAMESPACE=" + chartNamespace})
	inj := &injector{Process: p, webhook: webhook, admin: admin}
	testkit.Eventually(t, time.Minute, "the injector's /readyz (serving certificate)", func() error {
		if p.Exited() {
			t.Fatalf("tether-injector exited: %v\n%s", p.Err(), p.Tail(30))
		}
		resp, err := client.Get("http://" + admin + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
	return inj
}

// waitRoleBinding waits until the injector's sidecar RoleBinding exists in
// ns (present), binding the sidecar ClusterRole to exactly the service
// accounts sas of ns, or is gone (!present).
func waitRoleBinding(t *testing.T, c *cluster.Cluster, ns string, present bool, sas ...string) {
	t.Helper()
	waitNamedRoleBinding(t, c, ns, rbac.DefaultBindingName, sidecarRole, present, sas...)
}

// waitNamedRoleBinding waits until RoleBinding name in ns binds role to
// exactly the service accounts sas (present), or is gone (!present).
func waitNamedRoleBinding(t *testing.T, c *cluster.Cluster, ns, name, role string, present bool, sas ...string) {
	t.Helper()
	var want []rbacv1.Subject
	for _, sa := range sas {
		want = append(want, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns})
	}
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("RoleBinding %s in %s present=%v for %v", name, ns, present, sas), func() error {
		rb, err := c.Client().RbacV1().RoleBindings(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case present && err != nil:
			return err
		case present && (rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != role):
			return fmt.Errorf("roleRef %+v", rb.RoleRef)
		case present && !reflect.DeepEqual(rb.Subjects, want):
			return fmt.Errorf("subjects %+v, want %+v", rb.Subjects, want)
		case !present && err == nil:
			return errors.New("still there")
		case !present && !apierrors.IsNotFound(err):
			return err
		}
		return nil
	})
}

// checkModelServerReaders asserts, against the API server's authorizer,
// that the service account reader of ns may get, list and watch
// modelservers there and that the accounts of others may not.
func checkModelServerReaders(t *testing.T, c *cluster.Cluster, ns, reader string, others ...string) {
	t.Helper()
	for _, sa := range append([]string{reader}, others...) {
		for _, verb := range []string{"get", "list", "watch"} {
			sar, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:" + ns + ":" + sa,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb,
						Group: cluster.ModelServerGVR.Group, Resource: cluster.ModelServerGVR.Resource},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want := sa == reader; sar.Status.Allowed != want {
				t.Fatalf("%s modelservers as %s/%s: allowed %v, want %v", verb, ns, sa, sar.Status.Allowed, want)
			}
		}
	}
}

// checkPodReaders asserts, against the API server's own authorizer, that
// the service account reader of ns may get, list and watch pods there and
// that every account of others may not list them.
func checkPodReaders(t *testing.T, c *cluster.Cluster, ns, reader string, others ...string) {
	t.Helper()
	ctx := context.Background()
	r, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, reader))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list pods as %s/%s: %v, want allowed", ns, reader, err)
	}
	for _, o := range others {
		oc, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, o))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := oc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("list pods as %s/%s (another account of the namespace): %v, want Forbidden", ns, o, err)
		}
		// The same question to the authorizer directly, for every verb.
		for _, verb := range []string{"get", "list", "watch"} {
			sar, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               "system:serviceaccount:" + ns + ":" + o,
					Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "pods"},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed {
				t.Fatalf("SubjectAccessReview: %s/%s may %s pods (%s)", ns, o, verb, sar.Status.Reason)
			}
		}
	}
}

// TestScenario10Chart: the chart renders and applies cleanly; the injector
// runs with the chart's RBAC (as its service account) and binds the
// chart's sidecar ClusterRole in a labelled namespace; a service account
// there may then get, list and watch pods of its namespace, and nothing
// more.
func TestScenario10Chart(t *testing.T) {
	ctx := context.Background()
	c := cluster.Start(t)
	objs := renderChart(t)
	applyChart(t, c, objs)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	t.Logf("applied %d objects: %s", len(objs), strings.Join(kinds, ", "))

	// The injector keeps the Secret and the webhook's caBundle, which the
	// chart's Role and ClusterRole must allow.
	startInjector(t, c, objs, cluster.FreeAddr(t, "127.0.0.1"))
	waitCABundle(t, c)
	sec, err := c.Client().CoreV1().Secrets(chartNamespace).Get(ctx, injectorName+"-tls", metav1.GetOptions{})
	if err != nil || len(sec.Data) == 0 {
		t.Fatalf("the injector did not fill its Secret: %v (%d keys)", err, len(sec.Data))
	}

	// The pods are created before the namespace is labelled: the webhook
	// still has the chart's Service client config, which nothing serves
	// here (and a Service name must not be resolved off this machine). The
	// router pod carries the label the injector gives the pods it injects.
	c.CreateNamespace(t, "s10-app", nil)
	c.CreateNamespace(t, "s10-other", nil)
	if _, err := c.CreatePod(ctx, cluster.PodSpec{Namespace: "s10-app", Name: "model-0", Labels: map[string]string{"app": "ds"}, Port: 8000}); err != nil {
		t.Fatal(err)
	}
	// ms-router-0's sidecar follows a Kthena ModelServer: only its account
	// may also read modelservers.
	for _, r := range []struct{ name, sa, modelServer string }{{"router-0", "router", ""}, {"canary-0", "router-canary", ""}, {"ms-router-0", "router-ms", "ds"}} {
		var ann map[string]string
		if r.modelServer != "" {
			ann = map[string]string{rbac.ModelServerAnnotation: r.modelServer}
		}
		if _, err := c.Client().CoreV1().Pods("s10-app").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: r.name, Annotations: ann, Labels: map[string]string{"app": "router", rbac.InjectedLabel: rbac.InjectedLabelValue}},
			Spec:       corev1.PodSpec{ServiceAccountName: r.sa, Containers: []corev1.Container{{Name: "router", Image: "example.com/router:1.0"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setNamespaceLabel(t, c, "s10-app", rbac.NamespaceLabelValue)
	waitRoleBinding(t, c, "s10-app", true, "router", "router-canary", "router-ms")
	waitNamedRoleBinding(t, c, "s10-app", rbac.DefaultModelServerBindingName, modelServerRole, true, "router-ms")
	if _, err := c.Client().RbacV1().RoleBindings("s10-other").Get(ctx, rbac.DefaultBindingName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("unlabelled namespace got a sidecar RoleBinding (err %v)", err)
	}
	// The API server's authorizer: modelservers are readable by the
	// account of the pod that names a ModelServer, and by no other.
	checkModelServerReaders(t, c, "s10-app", "router-ms", "router", "router-canary")

	sa, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, "s10-app", "router"))
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s as s10-app/router: %v, want allowed", what, err)
		}
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s as s10-app/router: %v, want Forbidden", what, err)
		}
	}
	pods, err := sa.CoreV1().Pods("s10-app").List(ctx, metav1.ListOptions{})
	allowed("list pods", err)
	if len(pods.Items) != 4 {
		t.Fatalf("listed %d pods, want 4", len(pods.Items))
	}
	_, err = sa.CoreV1().Pods("s10-app").Get(ctx, "model-0", metav1.GetOptions{})
	allowed("get pod", err)
	w, err := sa.CoreV1().Pods("s10-app").Watch(ctx, metav1.ListOptions{})
	allowed("watch pods", err)
	w.Stop()

	_, err = sa.CoreV1().Secrets("s10-app").List(ctx, metav1.ListOptions{})
	forbidden("list secrets", err)
	_, err = sa.CoreV1().ConfigMaps("s10-app").List(ctx, metav1.ListOptions{})
	forbidden("list configmaps", err)
	_, err = sa.CoreV1().Pods("s10-app").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{})
	forbidden("create pod", err)
	forbidden("delete pod", sa.CoreV1().Pods("s10-app").Delete(ctx, "model-0", metav1.DeleteOptions{}))
	_, err = sa.CoreV1().Pods("s10-app").UpdateStatus(ctx, pods.Items[0].DeepCopy(), metav1.UpdateOptions{})
	forbidden("update pod status", err)
	_, err = sa.CoreV1().Pods("s10-other").List(ctx, metav1.ListOptions{})
	forbidden("list pods in another namespace", err)
	_, err = sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	forbidden("list pods cluster-wide", err)
	_, err = sa.CoreV1().Services("s10-app").List(ctx, metav1.ListOptions{})
	forbidden("list services", err)
	// Every other service account of the namespace: no pod reads.
	checkPodReaders(t, c, "s10-app", "router", "default", "model-server")

	t.Run("injector touches only its own RoleBindings", func(t *testing.T) {
		checkInjectorRoleBindingRights(t, c)
	})

	// The canary's pod goes: so does its account. Unlabelling the
	// namespace takes the rights away from the rest.
	if err := c.Client().CoreV1().Pods("s10-app").Delete(ctx, "canary-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoleBinding(t, c, "s10-app", true, "router", "router-ms")
	checkPodReaders(t, c, "s10-app", "router", "router-canary")
	// The ModelServer pod goes: its account loses the modelservers grant
	// (the binding goes with its last subject), not the pod reads of
	// router.
	if err := c.Client().CoreV1().Pods("s10-app").Delete(ctx, "ms-router-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamedRoleBinding(t, c, "s10-app", rbac.DefaultModelServerBindingName, modelServerRole, false)
	waitRoleBinding(t, c, "s10-app", true, "router")
	setNamespaceLabel(t, c, "s10-app", "")
	waitRoleBinding(t, c, "s10-app", false)
	testkit.Eventually(t, 10*time.Second, "list pods to be forbidden after unlabelling", func() error {
		if _, err := sa.CoreV1().Pods("s10-app").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			return fmt.Errorf("list pods: %v", err)
		}
		return nil
	})
}

// checkInjectorRoleBindingRights runs as the injector's service account
// (the chart's RBAC and admission policy): it may read and change the
// sidecar RoleBinding of a namespace, and no other; it may create no
// RoleBinding but one shaped like the sidecar binding.
func checkInjectorRoleBindingRights(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	admin := c.Client().RbacV1().RoleBindings("s10-app")
	other := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "team-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sidecarRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "router", Namespace: "s10-app"}},
	}
	if _, err := admin.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer admin.Delete(ctx, other.Name, metav1.DeleteOptions{})

	inj, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, chartNamespace, injectorName))
	if err != nil {
		t.Fatal(err)
	}
	rbs := inj.RbacV1().RoleBindings("s10-app")
	if _, err := rbs.Get(ctx, rbac.DefaultBindingName, metav1.GetOptions{}); err != nil {
		t.Fatalf("get its own RoleBinding: %v", err)
	}
	if _, err := rbs.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + rbac.DefaultBindingName}); err != nil {
		t.Fatalf("list its own RoleBinding by name: %v", err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Fatalf("injector %s: %v, want refused", what, err)
		}
		t.Logf("injector %s: refused: %v", what, err)
	}
	_, err = rbs.Get(ctx, other.Name, metav1.GetOptions{})
	refused("get another RoleBinding", err)
	_, err = rbs.List(ctx, metav1.ListOptions{})
	refused("list every RoleBinding", err)
	edited := other.DeepCopy()
	edited.Subjects = append(edited.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: "s10-app"})
	_, err = rbs.Update(ctx, edited, metav1.UpdateOptions{})
	refused("update another RoleBinding", err)
	refused("delete another RoleBinding", rbs.Delete(ctx, other.Name, metav1.DeleteOptions{}))

	// create cannot be limited by name in RBAC; the escalation check and
	// the chart's ValidatingAdmissionPolicy bound it. The policy reaches
	// the API server through a watch, so the first attempts may pass: a
	// passing one is deleted (as admin) and tried again.
	label := map[string]string{rbac.ManagedByLabel: rbac.ManagedByValue}
	sidecarSubject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "router", Namespace: "s10-other"}}
	for _, tc := range []struct {
		what string
		rb   *rbacv1.RoleBinding
		msg  string
	}{
		{"create a RoleBinding of another name", &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "not-tether", Labels: label},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sidecarRole},
			Subjects:   sidecarSubject,
		}, "only write its own sidecar RoleBinding"},
		{"bind a namespace's whole group", &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: rbac.DefaultBindingName, Labels: label},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sidecarRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:s10-other"}},
		}, "only bind service accounts of the binding's own namespace"},
		{"bind another namespace's account", &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: rbac.DefaultBindingName, Labels: label},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sidecarRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "router", Namespace: "s10-app"}},
		}, "only bind service accounts of the binding's own namespace"},
	} {
		testkit.Eventually(t, 30*time.Second, "the injector to be refused: "+tc.what, func() error {
			_, err := inj.RbacV1().RoleBindings("s10-other").Create(ctx, tc.rb, metav1.CreateOptions{})
			if err == nil {
				_ = c.Client().RbacV1().RoleBindings("s10-other").Delete(ctx, tc.rb.Name, metav1.DeleteOptions{})
				return errors.New("admitted (the admission policy is not loaded yet?)")
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("injector %s: %v, want a denial saying %q", tc.what, err, tc.msg)
			}
			return nil
		})
	}
	// A role it does not hold and may not bind: the escalation check.
	_, err = inj.RbacV1().RoleBindings("s10-other").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: rbac.DefaultBindingName, Labels: label},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   sidecarSubject,
	}, metav1.CreateOptions{})
	refused("bind cluster-admin", err)
	// What it does write is admitted.
	own := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: rbac.DefaultBindingName, Labels: label},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: sidecarRole},
		Subjects:   sidecarSubject,
	}
	if _, err := inj.RbacV1().RoleBindings("s10-other").Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the injector may not create the sidecar binding itself: %v", err)
	}
	// s10-other is not labelled: the injector's controller removes it.
	waitRoleBinding(t, c, "s10-other", false)
}

// setNamespaceLabel sets the injection label of namespace ns to value, or
// removes it when value is empty.
func setNamespaceLabel(t *testing.T, c *cluster.Cluster, ns, value string) {
	t.Helper()
	ctx := context.Background()
	n, err := c.Client().CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(n.Labels, rbac.NamespaceLabel)
	} else {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[rbac.NamespaceLabel] = value
	}
	if _, err := c.Client().CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitCABundle waits until the injector has filled the caBundle of every
// entry of its MutatingWebhookConfiguration, and returns the entries.
func waitCABundle(t *testing.T, c *cluster.Cluster) []admissionregv1.MutatingWebhook {
	t.Helper()
	var hooks []admissionregv1.MutatingWebhook
	testkit.Eventually(t, 30*time.Second, "caBundle on every webhook entry", func() error {
		mw, err := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), injectorName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, w := range mw.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return fmt.Errorf("webhook %s has no caBundle", w.Name)
			}
		}
		hooks = mw.Webhooks
		return nil
	})
	return hooks
}
