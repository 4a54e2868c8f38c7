package check

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherproxy/tether/injector/inject"
)

var (
	injectionSelector = inject.NamespaceLabel + "=" + inject.NamespaceLabelValue
	optInSelector     = inject.LabelInject + "=true"
)

// excluded reports whether the injector never injects namespace ns.
func (in *install) excluded(ns string) bool {
	return ns == "kube-system" || ns == in.cfg.Namespace || slices.Contains(in.cfg.ExcludedNamespaces, ns)
}

// servedNamespaces are the labelled namespaces the injector serves, and
// the labelled ones it never injects.
func (in *install) servedNamespaces(ctx context.Context) (served, excluded []string, err error) {
	list, err := in.o.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: injectionSelector})
	if err != nil {
		return nil, nil, fmt.Errorf("%s", apiProblem("namespaces", err))
	}
	for _, n := range list.Items {
		if in.excluded(n.Name) {
			excluded = append(excluded, n.Name)
		} else {
			served = append(served, n.Name)
		}
	}
	return served, excluded, nil
}

// checkNamespaces: some namespace is labelled (or some pod opts in), and
// no labelled namespace is one the injector never injects.
func checkNamespaces(ctx context.Context, in *install) Result {
	served, excluded, err := in.servedNamespaces(ctx)
	if err != nil {
		return fail("%s", err)
	}
	optIn, err := in.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: optInSelector})
	if err != nil {
		return fail("%s", apiProblem("pods labelled "+optInSelector, err))
	}
	var elsewhere int
	for _, p := range optIn.Items {
		if !slices.Contains(served, p.Namespace) && !in.excluded(p.Namespace) {
			elsewhere++
		}
	}
	if len(excluded) > 0 {
		return fail("namespaces %s are labelled %s but never injected (kube-system, the injector's own namespace and --exclude-namespace are excluded): run the routers elsewhere, or remove the label",
			strings.Join(excluded, ", "), injectionSelector)
	}
	if len(served) == 0 && elsewhere == 0 {
		return fail("no namespace is labelled %s and no pod is labelled %s, so nothing is injected: kubectl label namespace <router namespace> %s",
			injectionSelector, optInSelector, injectionSelector)
	}
	msg := "injection enabled in " + strings.Join(served, ", ")
	if len(served) == 0 {
		msg = "no namespace labelled " + injectionSelector
	}
	if elsewhere > 0 {
		msg += fmt.Sprintf("; %d pods opt in elsewhere (label %s)", elsewhere, optInSelector)
	}
	return ok("%s", msg)
}

// checkPods: every pod that asks for the sidecar has it. A pod created
// before its namespace was labelled, or while the webhook was down under
// failurePolicy Ignore, runs without one until its workload restarts.
func checkPods(ctx context.Context, in *install) Result {
	served, _, err := in.servedNamespaces(ctx)
	if err != nil {
		return fail("%s", err)
	}
	var missing []*corev1.Pod
	injected := 0
	look := func(p *corev1.Pod, selected bool) {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return
		}
		if hasSidecar(p) {
			injected++
			return
		}
		if wantsSidecar(p, selected) {
			missing = append(missing, p)
		}
	}
	for _, ns := range served {
		opts := metav1.ListOptions{Limit: 500}
		for {
			list, err := in.o.Client.CoreV1().Pods(ns).List(ctx, opts)
			if err != nil {
				return fail("%s", apiProblem("the pods of namespace "+ns, err))
			}
			for i := range list.Items {
				look(&list.Items[i], true)
			}
			if opts.Continue = list.Continue; opts.Continue == "" {
				break
			}
		}
	}
	optIn, err := in.o.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: optInSelector})
	if err != nil {
		return fail("%s", apiProblem("pods labelled "+optInSelector, err))
	}
	for i := range optIn.Items {
		if p := &optIn.Items[i]; !slices.Contains(served, p.Namespace) && !in.excluded(p.Namespace) {
			look(p, false)
		}
	}
	if len(missing) == 0 {
		return ok("%d pods have the sidecar; none that asks for it is without", injected)
	}
	var names []string
	for i, p := range missing {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(missing)-5))
			break
		}
		names = append(names, p.Namespace+"/"+p.Name)
	}
	first := missing[0]
	return fail("%d pods ask for the sidecar (tether.dev/ annotations) but have none: %s. They were created before their namespace was labelled, or while the webhook was unreachable (failurePolicy Ignore): restart their workloads, e.g. kubectl -n %s %s",
		len(missing), strings.Join(names, ", "), first.Namespace, restartHint(first))
}

// wantsSidecar reports whether the webhook would inject p: it opts in, or
// (in a labelled namespace) it carries tether annotations and does not
// opt out.
func wantsSidecar(p *corev1.Pod, namespaceSelected bool) bool {
	if p.Labels[inject.LabelInject] == "false" || p.Annotations[inject.AnnotationInject] == "false" || p.Spec.HostNetwork {
		return false
	}
	if p.Labels[inject.LabelInject] == "true" {
		return true
	}
	if !namespaceSelected {
		return false
	}
	for k := range p.Annotations {
		if strings.HasPrefix(k, inject.Prefix) && k != inject.AnnotationInject && k != inject.AnnotationStatus {
			return true
		}
	}
	return false
}

// restartHint names the command that recreates p with the sidecar.
func restartHint(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		switch o.Kind {
		case "ReplicaSet":
			if h := p.Labels["pod-template-hash"]; h != "" && strings.HasSuffix(o.Name, "-"+h) {
				return "rollout restart deployment/" + strings.TrimSuffix(o.Name, "-"+h)
			}
		case "StatefulSet", "DaemonSet":
			return "rollout restart " + strings.ToLower(o.Kind) + "/" + o.Name
		}
		return "delete pod " + p.Name + " (its " + o.Kind + " " + o.Name + " recreates it)"
	}
	return "delete pod " + p.Name + " and create it again"
}
