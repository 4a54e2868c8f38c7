// Package manifest injects the sidecar into the pod templates of a YAML
// manifest, offline, as the webhook would when the API server creates
// those pods: the same inject.Injector.Patch, the same JSONPatch applied
// to the pod's own JSON. It backs `tether-injector inject`. Objects that
// hold no pod template are passed through as written.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/inject"
)

// MaxInputBytes bounds a manifest (kubectl's own limit on one object is
// the API server's 3 MiB request body).
const MaxInputBytes = 16 << 20

// Options say what the API server would know about the objects' namespace.
type Options struct {
	// Namespace of objects without metadata.namespace.
	Namespace string
	// NamespaceLabels are the namespace's labels, which decide the webhook
	// entry a pod reaches (tether.dev/injection=enabled: every pod; else
	// only pods labelled tether.dev/inject=true).
	NamespaceLabels map[string]string
}

// Result is what happened to one object.
type Result struct {
	// Object is "kind/name" (items of a List too).
	Object    string
	Namespace string
	// Outcome is "injected", "denied", a skip reason, or "" for an object
	// without a pod template.
	Outcome  string
	Message  string // the denial
	Warnings []string
}

// Outcomes besides the skip reasons.
const (
	OutcomeInjected = "injected"
	OutcomeDenied   = "denied"
)

// Denied reports whether any result is a denial.
func Denied(rs []Result) bool {
	for _, r := range rs {
		if r.Outcome == OutcomeDenied {
			return true
		}
	}
	return false
}

// Inject reads a manifest (YAML or JSON, one or several documents, v1
// Lists) and writes it with the sidecar injected into every pod template
// the webhook would inject. Documents without a pod template, and
// workloads left as they are (skipped or denied), are written exactly as
// read. The error is for input that cannot be read.
func Inject(inj *inject.Injector, r io.Reader, w io.Writer, o Options) ([]Result, error) {
	in := utilyaml.NewYAMLReader(bufio.NewReader(io.LimitReader(r, MaxInputBytes+1)))
	var results []Result
	var out bytes.Buffer
	total := 0
	for i := 1; ; i++ {
		doc, err := in.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return results, fmt.Errorf("document %d: %w", i, err)
		}
		if total += len(doc); total > MaxInputBytes {
			return results, fmt.Errorf("the manifest is larger than %d bytes", MaxInputBytes)
		}
		rs, changed, err := injectDocument(inj, doc, o)
		if err != nil {
			return results, fmt.Errorf("document %d: %w", i, err)
		}
		results = append(results, rs...)
		if changed != nil {
			if doc, err = yaml.Marshal(changed); err != nil {
				return results, fmt.Errorf("document %d: %w", i, err)
			}
		} else if doc = trimSeparators(doc); len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if out.Len() > 0 {
			out.WriteString("---\n")
		}
		out.Write(doc)
		if !bytes.HasSuffix(doc, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	_, err := w.Write(out.Bytes())
	return results, err
}

// injectDocument returns the results of one document and, when anything
// in it was injected, the new object to write.
func injectDocument(inj *inject.Injector, doc []byte, o Options) ([]Result, map[string]any, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, nil, err
	}
	var obj map[string]any
	if err := decodeJSON(j, &obj); err != nil {
		return nil, nil, fmt.Errorf("not an object: %w", err)
	}
	if obj == nil { // only comments, or empty
		return nil, nil, nil
	}
	rs, changed, err := injectObject(inj, obj, o)
	if err != nil || !changed {
		return rs, nil, err
	}
	return rs, obj, nil
}

// injectObject injects obj in place (a workload, or each item of a
// List) and reports whether it changed.
func injectObject(inj *inject.Injector, obj map[string]any, o Options) ([]Result, bool, error) {
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	if kind == "" || apiVersion == "" {
		return nil, false, errors.New("not a Kubernetes object: apiVersion and kind are required")
	}
	if items, ok := obj["items"].([]any); ok && apiVersion == "v1" && strings.HasSuffix(kind, "List") {
		var results []Result
		changed := false
		for n, it := range items {
			item, ok := it.(map[string]any)
			if !ok {
				return results, false, fmt.Errorf("items[%d]: not an object", n)
			}
			rs, c, err := injectObject(inj, item, o)
			if err != nil {
				return results, false, fmt.Errorf("items[%d]: %w", n, err)
			}
			results = append(results, rs...)
			changed = changed || c
		}
		return results, changed, nil
	}

	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	if ns == "" {
		ns = o.Namespace
	}
	res := Result{Object: kind + "/" + name, Namespace: ns}
	tmpl, err := podTemplate(obj, apiVersion, kind)
	if err != nil || tmpl == nil {
		return []Result{res}, false, err
	}
	res.Outcome, res.Message, res.Warnings, err = injectTemplate(inj, tmpl, kind, name, ns, o)
	return []Result{res}, res.Outcome == OutcomeInjected, err
}

// podTemplate finds the pod template of a workload: the object itself for
// a Pod, nil for kinds that hold none.
func podTemplate(obj map[string]any, apiVersion, kind string) (map[string]any, error) {
	var path []string
	switch apiVersion + " " + kind {
	case "v1 Pod":
		return obj, nil
	case "apps/v1 Deployment", "apps/v1 StatefulSet", "apps/v1 DaemonSet", "apps/v1 ReplicaSet",
		"batch/v1 Job", "v1 ReplicationController":
		path = []string{"spec", "template"}
	case "batch/v1 CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template"}
	default:
		return nil, nil
	}
	cur := obj
	for _, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s %s has no %s", apiVersion, kind, strings.Join(path, "."))
		}
		cur = next
	}
	return cur, nil
}

// injectTemplate runs the webhook's decision on the pod a workload would
// create from tmpl and, when it injects, applies the patch to tmpl in
// place, as the API server applies it to the pod.
func injectTemplate(inj *inject.Injector, tmpl map[string]any, kind, name, ns string, o Options) (outcome, msg string, warnings []string, err error) {
	// The pod as the webhook would see it: the template's metadata and
	// spec, the namespace, and a generateName like the controller's.
	raw := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": tmpl["metadata"], "spec": tmpl["spec"]}
	if raw["metadata"] == nil {
		raw["metadata"] = map[string]any{}
	}
	rawJSON, err := json.Marshal(raw)
	if err != nil {
		return "", "", nil, err
	}
	var pod corev1.Pod
	if err := json.Unmarshal(rawJSON, &pod); err != nil {
		return "", "", nil, fmt.Errorf("pod template: %w", err)
	}
	pod.Namespace = ns
	if kind != "Pod" {
		pod.Name, pod.GenerateName = "", name+"-"
	}

	// The API server sends a pod to the webhook entry its selectors
	// match: every pod of a labelled namespace not labelled
	// tether.dev/inject=false, elsewhere only pods labelled "true".
	selected := o.NamespaceLabels[inject.NamespaceLabel] == inject.NamespaceLabelValue
	if !selected && pod.Labels[inject.LabelInject] != "true" {
		return string(inject.SkipNotSelected), "", nil, nil
	}
	patch, res, err := inj.Patch(&pod, inject.Request{Namespace: ns, NamespaceSelected: selected})
	if err != nil {
		if _, ok := inject.AsDenial(err); ok {
			return OutcomeDenied, err.Error(), nil, nil
		}
		return "", "", nil, err
	}
	if res.Pod == nil {
		return string(res.Skip), "", res.Warnings, nil
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return "", "", nil, fmt.Errorf("decode patch: %w", err)
	}
	patched, err := p.Apply(rawJSON)
	if err != nil {
		return "", "", nil, fmt.Errorf("apply patch: %w", err)
	}
	var out map[string]any
	if err := decodeJSON(patched, &out); err != nil {
		return "", "", nil, err
	}
	tmpl["metadata"], tmpl["spec"] = out["metadata"], out["spec"]
	return OutcomeInjected, "", res.Warnings, nil
}

// decodeJSON keeps numbers as written (json.Number), so integers beyond
// float64's precision pass through intact.
func decodeJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// trimSeparators drops the "---" lines the YAML reader leaves at the start
// of a document that follows an empty one; Inject writes its own.
func trimSeparators(doc []byte) []byte {
	for {
		line, rest, _ := bytes.Cut(doc, []byte("\n"))
		if string(bytes.TrimSpace(line)) != "---" {
			return doc
		}
		doc = rest
	}
}
