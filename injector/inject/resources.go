package inject

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tetherproxy/tether/sidecar/config"
)

// Resource is a per-pod request and, optionally, limit of one resource
// (tether.dev/proxy-cpu, tether.dev/proxy-memory): "REQUEST" or
// "REQUEST/LIMIT". Nil fields keep the injector's defaults.
type Resource struct {
	Request *resource.Quantity
	Limit   *resource.Quantity
}

// resourceInto parses "REQUEST" or "REQUEST/LIMIT": positive Kubernetes
// quantities, the request at most the limit.
func resourceInto(field func(*Annotations) *Resource) parser {
	return func(v string, a *Annotations, _ *problems) string {
		syntax := fmt.Sprintf("must be REQUEST or REQUEST/LIMIT, Kubernetes quantities such as 100m, 100m/500m or 128Mi/512Mi, got %q", v)
		parts := strings.Split(v, "/")
		if len(parts) > 2 {
			return syntax
		}
		var qs []*resource.Quantity
		for _, p := range parts {
			q, err := resource.ParseQuantity(strings.TrimSpace(p))
			if err != nil {
				return syntax
			}
			if q.Sign() <= 0 {
				return fmt.Sprintf("quantities must be positive, got %q", v)
			}
			qs = append(qs, &q)
		}
		r := Resource{Request: qs[0]}
		if len(qs) == 2 {
			r.Limit = qs[1]
			if r.Request.Cmp(*r.Limit) > 0 {
				return fmt.Sprintf("the request %s is above the limit %s", r.Request, r.Limit)
			}
		}
		*field(a) = r
		return ""
	}
}

// resources are the sidecar container's requests and limits: the
// injector's defaults with the pod's tether.dev/proxy-cpu and
// tether.dev/proxy-memory applied. A request above the limit it ends up
// with, or a memory limit the sidecar cannot run in, is a problem of the
// annotation that set it.
func (inj *Injector) resources(a *Annotations) (corev1.ResourceRequirements, problems) {
	var p problems
	r := *inj.opts.Resources.DeepCopy()
	for _, x := range []struct {
		key  string
		name corev1.ResourceName
		val  Resource
		flag string
	}{
		{AnnotationProxyCPU, corev1.ResourceCPU, a.ProxyCPU, "cpu"},
		{AnnotationProxyMemory, corev1.ResourceMemory, a.ProxyMemory, "memory"},
	} {
		if x.val.Request == nil {
			continue
		}
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[x.name] = *x.val.Request
		if x.val.Limit != nil {
			if r.Limits == nil {
				r.Limits = corev1.ResourceList{}
			}
			r.Limits[x.name] = *x.val.Limit
		} else if l, ok := r.Limits[x.name]; ok && x.val.Request.Cmp(l) > 0 {
			p.add(x.key, "the request %s is above the default limit %s (the chart's sidecar.resources.limits.%s); give both: %s/%s",
				x.val.Request, &l, x.flag, x.val.Request, x.val.Request)
		}
	}
	if l, ok := r.Limits[corev1.ResourceMemory]; ok && a.ProxyMemory.Limit != nil && l.Value() < config.MinMemoryLimitBytes {
		p.add(AnnotationProxyMemory, "the limit %s is below %s, the least the sidecar runs in (the Go runtime, connections and request bodies in flight need %s before any binding)",
			&l, resource.NewQuantity(config.MinMemoryLimitBytes, resource.BinarySI), resource.NewQuantity(config.RuntimeReserveBytes, resource.BinarySI))
	}
	return r, p
}

// goMemLimit is the GOMEMLIMIT for the container's memory limit, 0 without one.
func goMemLimit(r corev1.ResourceRequirements) int64 {
	l, ok := r.Limits[corev1.ResourceMemory]
	if !ok {
		return 0
	}
	return config.GoMemLimit(l.Value())
}
