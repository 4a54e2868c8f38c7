package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherproxy/tether/sidecar/buildinfo"
)

// TestBuildInfo: the sidecar's registry names the build it serves.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg)
	bi := buildinfo.Get()
	want := fmt.Sprintf(`# HELP tether_build_info Always 1; the labels name the running build (version, revision, goversion).
# TYPE tether_build_info gauge
tether_build_info{goversion=%q,revision=%q,version=%q} 1
`, bi.GoVersion, bi.Revision, bi.Version)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), buildinfo.MetricName); err != nil {
		t.Fatal(err)
	}
}
