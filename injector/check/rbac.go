package check

import (
	"context"
	"fmt"
	"sort"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherproxy/tether/injector/inject"
)

// access is one thing a service account must be allowed.
type access struct {
	namespace, group, resource, verb, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s = a.verb + " " + a.resource + "." + a.group
	}
	if a.name != "" {
		s += " " + a.name
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	}
	return s
}

// allowed asks the API server's authorizer whether the service account
// namespace/name may do a (a SubjectAccessReview).
func allowed(ctx context.Context, in *install, namespace, sa string, a access) (bool, error) {
	sar, err := in.o.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + namespace + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.namespace, Group: a.group, Resource: a.resource, Verb: a.verb, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("%s", apiProblem("the authorizer (create subjectaccessreviews)", err))
	}
	return sar.Status.Allowed, nil
}

// injectorNeeds is what the injector's service account must be allowed,
// from the flags it runs with (the chart's ClusterRole and Role grant it).
func injectorNeeds(in *install) []access {
	c := in.cfg
	var needs []access
	if c.SelfManaged {
		for _, v := range []string{"get", "list", "watch", "patch"} {
			needs = append(needs, access{"", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", v, c.WebhookConfig})
		}
		for _, v := range []string{"get", "update"} {
			needs = append(needs, access{c.Namespace, "", "secrets", v, c.SecretName})
		}
	}
	if c.ManageRBAC {
		for _, v := range []string{"get", "list", "watch"} {
			needs = append(needs, access{"", "", "namespaces", v, ""})
		}
		for _, v := range []string{"list", "watch"} {
			needs = append(needs, access{"", "", "pods", v, ""})
		}
		for _, v := range []string{"get", "list", "watch", "update", "delete"} {
			needs = append(needs, access{"", "rbac.authorization.k8s.io", "rolebindings", v, c.SidecarRoleBinding})
		}
		needs = append(needs,
			access{"", "rbac.authorization.k8s.io", "rolebindings", "create", ""},
			access{"", "rbac.authorization.k8s.io", "clusterroles", "bind", c.SidecarClusterRole})
		if c.ModelServerClusterRole != "" {
			for _, v := range []string{"get", "list", "watch", "update", "delete"} {
				needs = append(needs, access{"", "rbac.authorization.k8s.io", "rolebindings", v, c.ModelServerRoleBinding})
			}
			needs = append(needs, access{"", "rbac.authorization.k8s.io", "clusterroles", "bind", c.ModelServerClusterRole})
		}
	}
	return needs
}

// checkRBAC: the injector's service account may do what its flags need.
func checkRBAC(ctx context.Context, in *install) Result {
	if r := in.needConfig("what the injector needs"); r != nil {
		return *r
	}
	sa := in.o.Name
	if d := in.deployment; d != nil && d.Spec.Template.Spec.ServiceAccountName != "" {
		sa = d.Spec.Template.Spec.ServiceAccountName
	}
	who := in.o.Namespace + "/" + sa
	needs := injectorNeeds(in)
	if len(needs) == 0 {
		return ok("service account %s needs no API access (certificates from files, RoleBindings not managed)", who)
	}
	var denied []string
	for _, a := range needs {
		ok, err := allowed(ctx, in, in.o.Namespace, sa, a)
		if err != nil {
			return fail("%s", err)
		}
		if !ok {
			denied = append(denied, a.String())
		}
	}
	if len(denied) > 0 {
		return fail("service account %s may not %s: re-apply the chart's RBAC (ClusterRole and ClusterRoleBinding %s, Role and RoleBinding %s in %s)",
			who, strings.Join(denied, ", "), in.o.Name, in.o.Name, in.o.Namespace)
	}
	var what []string
	if in.cfg.SelfManaged {
		what = append(what, "keep Secret "+in.cfg.SecretName+" and the caBundle of "+in.cfg.WebhookConfig)
	}
	if in.cfg.ManageRBAC {
		what = append(what, "watch pods and namespaces, and bind ClusterRole "+in.cfg.SidecarClusterRole+" with RoleBindings "+in.cfg.SidecarRoleBinding)
		if in.cfg.ModelServerClusterRole != "" {
			what = append(what, "bind ClusterRole "+in.cfg.ModelServerClusterRole+" with RoleBindings "+in.cfg.ModelServerRoleBinding)
		}
	}
	return ok("service account %s may %s", who, strings.Join(what, ", "))
}

// checkSidecarRBAC: the service account of every injected pod may watch
// pods in its namespace (backends, gossip peers), and that of every pod
// whose pool is a Kthena ModelServer (tether.dev/model-server) may watch
// modelservers there.
func checkSidecarRBAC(ctx context.Context, in *install) Result {
	served, _, err := in.servedNamespaces(ctx)
	if err != nil {
		return fail("%s", err)
	}
	pods, err := in.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: inject.LabelInjected + "=true"})
	if err != nil {
		return fail("%s", apiProblem("pods labelled "+inject.LabelInjected+"=true", err))
	}
	accounts := map[string]bool{}
	readers := map[string]bool{} // accounts of pods that read a ModelServer
	for _, p := range pods.Items {
		sa := p.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		accounts[p.Namespace+"/"+sa] = true
		if _, ok := p.Annotations[inject.AnnotationModelServer]; ok {
			readers[p.Namespace+"/"+sa] = true
		}
	}
	if len(accounts) == 0 {
		return ok("no injected pods yet")
	}
	keys := sortedKeys(accounts)
	var denied, deniedMS []string
	for _, k := range keys {
		ns, sa, _ := strings.Cut(k, "/")
		for _, verb := range []string{"get", "list", "watch"} {
			ok, err := allowed(ctx, in, ns, sa, access{namespace: ns, resource: "pods", verb: verb})
			if err != nil {
				return fail("%s", err)
			}
			if !ok {
				denied = append(denied, fmt.Sprintf("%s may not %s pods", k, verb))
				break
			}
		}
		if !readers[k] {
			continue
		}
		for _, verb := range []string{"get", "list", "watch"} {
			ok, err := allowed(ctx, in, ns, sa, access{namespace: ns, group: modelServerGroup, resource: "modelservers", verb: verb})
			if err != nil {
				return fail("%s", err)
			}
			if !ok {
				deniedMS = append(deniedMS, fmt.Sprintf("%s may not %s modelservers.%s", k, verb, modelServerGroup))
				break
			}
		}
	}
	var problems []string
	if len(denied) > 0 {
		hint := fmt.Sprintf("bind ClusterRole %s to them (the injector's --manage-rbac is off)", in.cfg.SidecarClusterRole)
		if in.cfg.ManageRBAC {
			hint = fmt.Sprintf("the injector binds ClusterRole %s there with RoleBinding %s, for pods labelled %s=true in namespaces labelled %s (served: %s): kubectl -n <namespace> get rolebinding %s; kubectl -n %s logs deployment/%s",
				in.cfg.SidecarClusterRole, in.cfg.SidecarRoleBinding, inject.LabelInjected, injectionSelector, strings.Join(served, ", "),
				in.cfg.SidecarRoleBinding, in.o.Namespace, in.o.Name)
		}
		problems = append(problems, fmt.Sprintf("%s: %s", strings.Join(denied, "; "), hint))
	}
	if len(deniedMS) > 0 {
		hint := "grant them get, list and watch on modelservers (the injector binds no ModelServer role: --model-server-cluster-role is empty or --manage-rbac is off)"
		if in.cfg.ManageRBAC && in.cfg.ModelServerClusterRole != "" {
			hint = fmt.Sprintf("the injector binds ClusterRole %s with RoleBinding %s to the accounts of pods annotated %s: kubectl -n <namespace> get rolebinding %s",
				in.cfg.ModelServerClusterRole, in.cfg.ModelServerRoleBinding, inject.AnnotationModelServer, in.cfg.ModelServerRoleBinding)
		}
		problems = append(problems, fmt.Sprintf("%s: %s", strings.Join(deniedMS, "; "), hint))
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; "))
	}
	msg := "the service accounts of injected pods may watch pods in their namespace: " + strings.Join(keys, ", ")
	if len(readers) > 0 {
		msg += "; and modelservers: " + strings.Join(sortedKeys(readers), ", ")
	}
	return ok("%s", msg)
}

// modelServerGroup is the API group of Kthena's ModelServers.
const modelServerGroup = "networking.serving.volcano.sh"

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
