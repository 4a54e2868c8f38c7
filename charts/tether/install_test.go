package chart_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readmeSection returns the README's "## <title>" section.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", title)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}

// TestReadmeInstallLine renders the chart with the README's `helm install`
// line of "Install on a cluster" (the image overrides), with its shell
// variables set as the README sets them, and checks that the injector
// runs the injector image and injects the sidecar image given there.
func TestReadmeInstallLine(t *testing.T) {
	const registry, version = "registry.example.com/llm", "v0.2.0-3-g1a2b3c4-dirty"
	var line string
	for _, l := range strings.Split(readmeSection(t, "Install on a cluster"), "\n") {
		if strings.HasPrefix(l, "helm install ") {
			line = l
		}
	}
	fields := strings.Fields(strings.NewReplacer("$REGISTRY", registry, "$VERSION", version).Replace(line))
	if len(fields) < 4 || strings.Join(fields[:4], " ") != "helm install "+release+" charts/tether" {
		t.Fatalf("no `helm install %s charts/tether …` line in the README's install section: %q", release, line)
	}
	args := []string{"template", release, "."}
	for i := 4; i < len(fields); i++ {
		switch f := fields[i]; f {
		case "--create-namespace":
		case "--namespace", "--set":
			if i+1 == len(fields) {
				t.Fatalf("%s without a value in %q", f, line)
			}
			args = append(args, f, fields[i+1])
			i++
		default:
			t.Fatalf("the README's helm install line has %q, which this test does not know", f)
		}
	}
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, out)
	d := o.deployments["tether-injector"]
	if d == nil || d.Namespace != namespace {
		t.Fatalf("no tether-injector Deployment in %s", namespace)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if want := registry + "/tether-injector:" + version; c.Image != want {
		t.Errorf("injector image %q, want %q", c.Image, want)
	}
	cfg := checkArgs(t, c.Args)
	if want := registry + "/tether-sidecar:" + version; cfg.SidecarImage != want {
		t.Errorf("injected sidecar image %q, want %q", cfg.SidecarImage, want)
	}
	// The README's router uses the gossip store in namespace llm: the line
	// must create the ring's key there, under the name the injector mounts.
	if _, ok := o.secrets["llm/"+cfg.GossipKeySecret]; !ok || cfg.GossipKeySecret == "" {
		t.Errorf("no gossip key Secret %q in namespace llm (Secrets: %v)", cfg.GossipKeySecret, slices.Collect(maps.Keys(o.secrets)))
	}
}
