// Package modelserver defines a pool by a Kthena ModelServer
// (networking.serving.volcano.sh/v1alpha1), read as unstructured data so
// no generated client is needed: the pods it selects (workloadSelector,
// a prefill/decode pool with pdGroup), their port (workloadPort.port),
// its model, its timeout (trafficPolicy.timeout) and its sticky-session
// block (trafficPolicy.sessionSticky). Source follows one object with a
// dynamic informer: an edit takes effect without a restart, a deletion
// takes the pool down with a clear error.
package modelserver

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherproxy/tether/sidecar/config"
)

// GVR is the ModelServer resource.
var GVR = schema.GroupVersionResource{Group: "networking.serving.volcano.sh", Version: "v1alpha1", Resource: "modelservers"}

// Kind is the ModelServer kind.
const Kind = "ModelServer"

// maxModelBytes is Kthena's bound on spec.model.
const maxModelBytes = 256

// Definition is what a ModelServer says about its pool.
type Definition struct {
	// Backends is a kubernetes selector (matchLabels), or prefill and
	// decode selectors with the group label (pdGroup), in the object's
	// namespace, at workloadPort.port.
	Backends config.Backends
	// Model is spec.model: the model the pool serves ("" when unset).
	Model string
	// Timeout is spec.trafficPolicy.timeout: how long to wait for a
	// backend's response headers (0: no bound).
	Timeout time.Duration
	// Sticky is spec.trafficPolicy.sessionSticky; nil makes the pool
	// non-sticky (Kthena's rule: stickiness is on when the block is set).
	Sticky *config.SessionSticky
}

// Parse reads a ModelServer. Every problem is reported at once, each with
// its field path (spec.workloadPort.port: ...). Fields tether has no use
// for (inferenceEngine, kvConnector, trafficPolicy.retry) are ignored.
func Parse(obj *unstructured.Unstructured) (*Definition, error) {
	p := &parser{}
	d := &Definition{}
	spec, _ := obj.Object["spec"].(map[string]any)
	if spec == nil {
		return nil, errors.New("spec: required")
	}
	ns := obj.GetNamespace()

	// workloadSelector: matchLabels, and pdGroup for prefill/decode pools.
	ws := p.object(spec, "spec", "workloadSelector")
	match := p.labels(ws, "spec.workloadSelector", "matchLabels")
	port := p.port(p.object(spec, "spec", "workloadPort"))
	sel := func(extra labels.Set) *config.KubeSelector {
		all := labels.Merge(match, extra)
		return &config.KubeSelector{Namespace: ns, Selector: labels.SelectorFromSet(all).String(), Port: port}
	}
	if pd := p.object(ws, "spec.workloadSelector", "pdGroup"); pd != nil {
		const f = "spec.workloadSelector.pdGroup"
		key := p.str(pd, f, "groupKey")
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			p.add(f+".groupKey", "must be a label key, got %q", key)
		}
		prefill := p.labels(pd, f, "prefillLabels")
		decode := p.labels(pd, f, "decodeLabels")
		if len(prefill) == 0 {
			p.add(f+".prefillLabels", "required: the labels that tell prefill pods apart")
		}
		if len(decode) == 0 {
			p.add(f+".decodeLabels", "required: the labels that tell decode pods apart")
		}
		d.Backends = config.Backends{Prefill: sel(prefill), Decode: sel(decode), GroupLabel: key}
	} else {
		if len(match) == 0 {
			p.add("spec.workloadSelector.matchLabels", "required (an empty selector would send traffic to every pod of the namespace)")
		}
		d.Backends = config.Backends{Kubernetes: sel(nil)}
	}

	if m, ok := spec["model"]; ok && m != nil {
		s, isStr := m.(string)
		switch {
		case !isStr:
			p.add("spec.model", "must be a string")
		case len(s) > maxModelBytes:
			p.add("spec.model", "is %d bytes, at most %d", len(s), maxModelBytes)
		default:
			d.Model = s
		}
	}

	tp := p.object(spec, "spec", "trafficPolicy")
	if v := p.str(tp, "spec.trafficPolicy", "timeout"); v != "" {
		t, err := time.ParseDuration(v)
		switch {
		case err != nil:
			p.add("spec.trafficPolicy.timeout", "must be a duration such as 10s, got %q", v)
		case t < 0:
			p.add("spec.trafficPolicy.timeout", "must not be negative, got %q", v)
		default:
			d.Timeout = t
		}
	}
	if ss := p.object(tp, "spec.trafficPolicy", "sessionSticky"); ss != nil {
		d.Sticky = p.sticky(ss, "spec.trafficPolicy.sessionSticky")
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return d, nil
}

// parser collects field errors while reading unstructured data.
type parser struct{ errs []error }

func (p *parser) add(field, format string, a ...any) {
	p.errs = append(p.errs, &config.FieldError{Field: field, Rule: fmt.Sprintf(format, a...)})
}

// object returns parent[key] as an object; nil when absent (or null).
func (p *parser) object(parent map[string]any, at, key string) map[string]any {
	v, ok := parent[key]
	if !ok || v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		p.add(at+"."+key, "must be an object")
	}
	return m
}

// str returns parent[key] as a string; "" when absent.
func (p *parser) str(parent map[string]any, at, key string) string {
	v, ok := parent[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		p.add(at+"."+key, "must be a string")
	}
	return s
}

// integer returns parent[key] as a whole number: JSON numbers arrive as
// int64 or float64.
func (p *parser) integer(parent map[string]any, at, key string) (int64, bool) {
	v, ok := parent[key]
	if !ok || v == nil {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	}
	p.add(at+"."+key, "must be a whole number")
	return 0, false
}

// labels reads a map of label key to value, checking both.
func (p *parser) labels(parent map[string]any, at, key string) labels.Set {
	m := p.object(parent, at, key)
	set := labels.Set{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // errors in a stable order
	for _, k := range keys {
		f := at + "." + key + "." + k
		v, ok := m[k].(string)
		switch {
		case !ok:
			p.add(f, "must be a string")
		case len(validation.IsQualifiedName(k)) > 0:
			p.add(f, "%q is not a label key", k)
		case len(validation.IsValidLabelValue(v)) > 0:
			p.add(f, "%q is not a label value", v)
		default:
			set[k] = v
		}
	}
	return set
}

// port reads workloadPort: port 1..65535, protocol http (or unset).
func (p *parser) port(wp map[string]any) int {
	const f = "spec.workloadPort"
	if wp == nil {
		p.add(f+".port", "required")
		return 0
	}
	n, ok := p.integer(wp, f, "port")
	switch {
	case !ok:
		if _, set := wp["port"]; !set {
			p.add(f+".port", "required")
		}
		return 0
	case n < 1 || n > 65535:
		p.add(f+".port", "must be 1..65535, got %d", n)
		return 0
	}
	if proto := p.str(wp, f, "protocol"); proto != "" && !strings.EqualFold(proto, "http") {
		p.add(f+".protocol", "%q is not supported: tether-sidecar speaks plain HTTP to model servers", proto)
	}
	return int(n)
}

// sticky reads the sessionSticky block as the config's own, whose rules
// (checked by the Source with the pool's keys) it then has to pass.
func (p *parser) sticky(ss map[string]any, at string) *config.SessionSticky {
	s := &config.SessionSticky{}
	if n, ok := p.integer(ss, at, "sessionAffinitySeconds"); ok {
		if n < math.MinInt32 || n > math.MaxInt32 {
			p.add(at+".sessionAffinitySeconds", "out of range, got %d", n)
		} else {
			s.SessionAffinitySeconds = config.Seconds(int(n))
		}
	}
	raw, ok := ss["sources"]
	if !ok || raw == nil {
		return s // Validate reports the missing sources
	}
	list, ok := raw.([]any)
	if !ok {
		p.add(at+".sources", "must be a list")
		return s
	}
	for i, item := range list {
		f := fmt.Sprintf("%s.sources[%d]", at, i)
		m, ok := item.(map[string]any)
		if !ok {
			p.add(f, "must be an object with type and name")
			continue
		}
		s.Sources = append(s.Sources, config.Source{Type: config.SourceType(p.str(m, f, "type")), Name: p.str(m, f, "name")})
	}
	return s
}
