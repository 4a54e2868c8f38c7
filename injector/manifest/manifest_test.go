package manifest_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/manifest"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: router, namespace: llm}
spec:
  selector: {matchLabels: {app: router}}
  template:
    metadata:
      labels: {app: router}
      annotations:
        tether.dev/sources: Header:X-Session-ID
        tether.dev/backend-selector: app=vllm
        tether.dev/backend-port: "8000"
        tether.dev/store: gossip
    spec:
      containers: [{name: router, image: example.com/router:1.0, ports: [{containerPort: 8080}]}]
      volumes: [{name: cache, emptyDir: {}}]
`

func newInjector(t *testing.T) *inject.Injector {
	t.Helper()
	inj, err := inject.New(inject.Options{Image: "example.com/tether-sidecar:test", Version: "test", GossipKeySecret: "tether-gossip-key"})
	if err != nil {
		t.Fatal(err)
	}
	return inj
}

// TestSameAsWebhook: the template the command writes is the pod the API
// server would store: the webhook's patch applied to the pod the
// Deployment's ReplicaSet creates.
func TestSameAsWebhook(t *testing.T) {
	inj := newInjector(t)
	var out bytes.Buffer
	rs, err := manifest.Inject(inj, strings.NewReader(deployment), &out,
		manifest.Options{NamespaceLabels: map[string]string{inject.NamespaceLabel: inject.NamespaceLabelValue}})
	if err != nil || len(rs) != 1 || rs[0].Outcome != manifest.OutcomeInjected {
		t.Fatalf("%v %+v", err, rs)
	}
	var got appsv1.Deployment
	if err := yaml.UnmarshalStrict(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}

	var in appsv1.Deployment
	if err := yaml.Unmarshal([]byte(deployment), &in); err != nil {
		t.Fatal(err)
	}
	// The pod a ReplicaSet creates, as the webhook receives it.
	pod := &corev1.Pod{ObjectMeta: in.Spec.Template.ObjectMeta, Spec: in.Spec.Template.Spec}
	pod.Namespace, pod.GenerateName = "llm", "router-"
	patch, res, err := inj.Patch(pod, inject.Request{Namespace: "llm", NamespaceSelected: true})
	if err != nil || res.Pod == nil {
		t.Fatalf("webhook: %v %+v", err, res)
	}
	orig, _ := json.Marshal(pod)
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := p.Apply(orig)
	if err != nil {
		t.Fatal(err)
	}
	var want corev1.Pod
	if err := json.Unmarshal(patched, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec.Template.Spec, want.Spec) {
		t.Errorf("spec differs from the webhook's\ncommand: %+v\nwebhook: %+v", got.Spec.Template.Spec, want.Spec)
	}
	if !reflect.DeepEqual(got.Spec.Template.Labels, want.Labels) || !reflect.DeepEqual(got.Spec.Template.Annotations, want.Annotations) {
		t.Errorf("metadata differs\ncommand: %v %v\nwebhook: %v %v", got.Spec.Template.Labels, got.Spec.Template.Annotations, want.Labels, want.Annotations)
	}
	// Gossip peers: the template's labels, as for the pods it creates.
	if !strings.Contains(out.String(), "peerSelector: app=router") {
		t.Errorf("no peer selector from the template's labels:\n%s", out.String())
	}

	// Injected output goes through the webhook unchanged (already injected).
	var again bytes.Buffer
	rs, err = manifest.Inject(inj, &out, &again, manifest.Options{NamespaceLabels: map[string]string{inject.NamespaceLabel: inject.NamespaceLabelValue}})
	if err != nil || rs[0].Outcome != string(inject.SkipAlreadyInjected) {
		t.Fatalf("second injection: %v %+v", err, rs)
	}
}

// TestPassThrough: documents without a pod template are written byte
// for byte, comments and formatting included.
func TestPassThrough(t *testing.T) {
	in := "# settings\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}   # inline\ndata: {big: 12345678901234567890}\n---\n---\n---\n# only a comment\n"
	var out bytes.Buffer
	rs, err := manifest.Inject(newInjector(t), strings.NewReader(in), &out, manifest.Options{Namespace: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Outcome != "" || rs[0].Object != "ConfigMap/a" || rs[0].Namespace != "x" {
		t.Errorf("results %+v", rs)
	}
	want := "# settings\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}   # inline\ndata: {big: 12345678901234567890}\n---\n# only a comment\n"
	if out.String() != want {
		t.Errorf("got\n%q\nwant\n%q", out.String(), want)
	}
}

func TestLimits(t *testing.T) {
	big := "# " + strings.Repeat("x", manifest.MaxInputBytes) + "\n"
	if _, err := manifest.Inject(newInjector(t), strings.NewReader(big), &bytes.Buffer{}, manifest.Options{}); err == nil {
		t.Error("a manifest over the limit was read")
	}
	for _, in := range []string{"[1, 2]\n", "apiVersion: v1\nkind: List\nitems: [3]\n", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {}\n"} {
		if _, err := manifest.Inject(newInjector(t), strings.NewReader(in), &bytes.Buffer{}, manifest.Options{}); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// FuzzInject: no manifest makes the command panic, and whatever it
// writes for a manifest it accepts is YAML again.
func FuzzInject(f *testing.F) {
	f.Add(deployment)
	f.Add("apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(deployment, "\n", "\n  "))
	f.Add("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec: {jobTemplate: {spec: {template: {spec: {containers: []}}}}}\n")
	f.Add("---\n# c\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {tether.dev/sources: 'Header:x'}}\n")
	inj, err := inject.New(inject.Options{Image: "example.com/tether-sidecar:test", Version: "test", GossipKeySecret: "k"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var out bytes.Buffer
		_, err := manifest.Inject(inj, strings.NewReader(in), &out, manifest.Options{
			Namespace: "llm", NamespaceLabels: map[string]string{inject.NamespaceLabel: inject.NamespaceLabelValue}})
		if err != nil {
			return
		}
		var again bytes.Buffer
		if _, err := manifest.Inject(inj, &out, &again, manifest.Options{Namespace: "llm"}); err != nil {
			t.Fatalf("the output does not read back: %v\n%s", err, out.String())
		}
	})
}
