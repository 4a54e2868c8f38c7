package buildinfo

import (
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{
		Main:     debug.Module{Version: "v0.0.0-20260101120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef"}},
	}
	for _, c := range []struct {
		name               string
		ldVersion, ldRev   string
		bi                 *debug.BuildInfo
		wantVersion, wantR string
	}{
		{"ldflags win", "v1.2.3", "feedbeef", vcs, "v1.2.3", "feedbeef"},
		{"toolchain's pseudo-version, made a valid image tag", "", "", vcs, "v0.0.0-20260101120000-0123456789ab-dirty", "0123456789abcdef"},
		{"go install of a tag", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0", "unknown"},
		{"devel build outside git", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel", "unknown"},
		{"no build info", "", "", nil, "devel", "unknown"},
		{"version alone from ldflags", "v2.0.0", "", vcs, "v2.0.0", "0123456789abcdef"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := resolve(c.ldVersion, c.ldRev, c.bi)
			if got.Version != c.wantVersion || got.Revision != c.wantR || got.GoVersion != runtime.Version() {
				t.Fatalf("resolve = %+v, want version %q revision %q goversion %q", got, c.wantVersion, c.wantR, runtime.Version())
			}
		})
	}
}

func TestString(t *testing.T) {
	got := Info{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.26.0"}.String()
	if want := "v1.2.3 (revision abc, go1.26.0)"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	i := Get()
	want := `# HELP tether_build_info Always 1; the labels name the running build (version, revision, goversion).
# TYPE tether_build_info gauge
tether_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricName); err != nil {
		t.Fatal(err)
	}
}

func TestLDFlags(t *testing.T) {
	// -X silently does nothing when the path is wrong: Package must be
	// this package's real import path.
	if got := reflect.TypeOf(Info{}).PkgPath(); got != Package {
		t.Fatalf("Package = %q, but the import path is %q", Package, got)
	}
	got := LDFlags("v1.2.3", "abc")
	want := "-X github.com/tetherproxy/tether/sidecar/buildinfo.version=v1.2.3 -X github.com/tetherproxy/tether/sidecar/buildinfo.revision=abc"
	if got != want {
		t.Fatalf("LDFlags = %q, want %q", got, want)
	}
}
