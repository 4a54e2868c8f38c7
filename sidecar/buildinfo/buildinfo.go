// Package buildinfo says which build of tether is running: the version and
// revision the Makefile stamps into both binaries with -ldflags (see
// LDFlags), and the Go version. Both binaries print it for --version and
// export it as the tether_build_info gauge, so a scrape or a bug report
// names the exact build.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Set with -ldflags "-X"; see LDFlags. Empty in a plain `go build`.
var (
	version  string
	revision string
)

// Info identifies a build.
type Info struct {
	// Version is `git describe --tags --always --dirty` of the source
	// (v1.2.3 on a release tag), as stamped by the Makefile.
	Version string
	// Revision is the full commit hash.
	Revision string
	// GoVersion is the toolchain that built the binary (go1.26.0).
	GoVersion string
}

var get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, revision, bi)
})

// Get returns this binary's build information.
func Get() Info { return get() }

// resolve prefers the -ldflags values. Without them (go build, go install,
// go test) it falls back to what the Go toolchain recorded: the module
// version (a tag for `go install ...@v1.2.3`, a pseudo-version for a
// build in a git checkout) and the vcs.revision setting.
func resolve(ldVersion, ldRevision string, bi *debug.BuildInfo) Info {
	info := Info{Version: ldVersion, Revision: ldRevision, GoVersion: runtime.Version()}
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			// A pseudo-version's "+dirty" is not allowed in an image tag,
			// and the injector derives its default sidecar image from this.
			info.Version = strings.ReplaceAll(bi.Main.Version, "+", "-")
		}
		if info.Revision == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					info.Revision = s.Value
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// String is the --version line: "v1.2.3 (revision 0123abc…, go1.26.0)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// MetricName is the build information gauge both binaries export.
const MetricName = "tether_build_info"

// Collector returns the tether_build_info gauge: always 1, the build in its
// labels (version, revision, goversion). Register one per registry.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricName,
		Help:        "Always 1; the labels name the running build (version, revision, goversion).",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}

// Package is this package's import path, which -ldflags "-X" needs.
const Package = "github.com/tetherproxy/tether/sidecar/buildinfo"

// LDFlags returns the -ldflags arguments that stamp version and revision
// into a binary that imports this package. The Makefile and the Dockerfile
// spell out the same two -X flags.
func LDFlags(version, revision string) string {
	return fmt.Sprintf("-X %s.version=%s -X %s.revision=%s", Package, version, Package, revision)
}
