package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tetherproxy/tether/injector/app"
	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/manifest"
)

const injectUsage = `Usage: tether-injector inject -f FILE [flags]

Prints the manifest with the tether sidecar injected into every pod
template the webhook would inject (Pods, Deployments, StatefulSets,
DaemonSets, ReplicaSets, ReplicationControllers, Jobs, CronJobs, and v1
Lists of them; one or several YAML or JSON documents in, YAML out). It runs
the webhook's own code on the pods those templates would create; other
objects, and workloads left alone, are printed as they were. What happened
to each object goes to stderr. Exit status 1 when a pod would be denied.

  tether-injector inject -f router.yaml | kubectl apply -f -
  tether-injector inject -f router.yaml --namespace llm --default-store gossip

The sidecar flags (--sidecar-*, --native-sidecar, --prestop-sleep,
--default-store, --redis-*, --gossip-key-secret, --exclude-namespace) are
the injector's own: copy them from the injector Deployment's arguments
(kubectl -n tether-system get deploy tether-injector -o
jsonpath='{.spec.template.spec.containers[0].args}') to see exactly what
the installed webhook would do.

Flags:
`

// runInject is `tether-injector inject`.
func runInject(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tether-injector inject", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, injectUsage)
		fs.PrintDefaults()
	}
	var cfg app.Config
	cfg.RegisterSidecarFlags(fs)
	var file, namespace, nsLabels string
	for _, n := range []string{"f", "filename"} {
		fs.StringVar(&file, n, "", "the manifest to inject, - for stdin (required)")
	}
	for _, n := range []string{"n", "namespace"} {
		fs.StringVar(&namespace, n, "default", "namespace of the objects that name none")
	}
	fs.StringVar(&nsLabels, "namespace-labels", inject.NamespaceLabel+"="+inject.NamespaceLabelValue,
		"labels of that namespace, k=v,... (empty: an unlabelled namespace, where only pods labelled "+inject.LabelInject+"=true are injected)")
	fs.StringVar(&cfg.Namespace, "injector-namespace", "tether-system", "the injector's namespace, never injected")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "tether-injector inject: unexpected argument %q (the manifest is -f FILE)\n", fs.Arg(0))
		return exitUsage
	case file == "":
		fmt.Fprintln(stderr, "tether-injector inject: -f FILE is required (- for stdin)")
		return exitUsage
	}
	labelSet, err := parseLabels(nsLabels)
	if err != nil {
		fmt.Fprintf(stderr, "tether-injector inject: --namespace-labels: %v\n", err)
		return exitUsage
	}
	opts, err := cfg.InjectOptions()
	if err == nil {
		var inj *inject.Injector
		if inj, err = inject.New(opts); err == nil {
			return injectFile(inj, file, manifest.Options{Namespace: namespace, NamespaceLabels: labelSet}, stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "tether-injector inject: %s\n", strings.TrimPrefix(err.Error(), "inject: "))
	return exitUsage
}

func injectFile(inj *inject.Injector, file string, o manifest.Options, stdin io.Reader, stdout, stderr io.Writer) int {
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintf(stderr, "tether-injector inject: %v\n", err)
			return exitProblems
		}
		defer f.Close()
		r = f
	}
	results, err := manifest.Inject(inj, r, stdout, o)
	for _, res := range results {
		report(stderr, res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tether-injector inject: %s: %v\n", file, err)
		return exitProblems
	}
	if manifest.Denied(results) {
		return exitProblems
	}
	return exitOK
}

// report prints what happened to one object, with its warnings.
func report(w io.Writer, r manifest.Result) {
	what := r.Outcome
	switch r.Outcome {
	case "":
		what = "unchanged (no pod template)"
	case manifest.OutcomeInjected:
	case manifest.OutcomeDenied:
		what = "denied: " + r.Message
	default:
		what = "skipped: " + r.Outcome
	}
	fmt.Fprintf(w, "%s (namespace %s): %s\n", r.Object, r.Namespace, what)
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

// parseLabels reads k=v,... with valid label keys and values.
func parseLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return map[string]string{}, nil
	}
	set, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a label key: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(set[k]); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a label value: %s", set[k], strings.Join(errs, "; "))
		}
	}
	return set, nil
}
