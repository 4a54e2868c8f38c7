package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/tetherproxy/tether/sidecar/buildinfo"
)

// compile builds every image's binary for every platform: static
// (CGO_ENABLED=0), without build paths (-trimpath), stripped (-s -w), with
// version and revision stamped (buildinfo.LDFlags). One `go build` per
// platform builds all the packages; the Go build cache is the user's, so
// a rebuild only links. It returns name → platform → binary path.
func compile(ctx context.Context, o Options, work string) (map[string]map[Platform]string, error) {
	bins := map[string]map[Platform]string{}
	for _, s := range o.Images {
		bins[s.Name] = map[Platform]string{}
	}
	ldflags := "-s -w " + buildinfo.LDFlags(o.Version, o.Revision)
	for _, p := range o.Platforms {
		dir := filepath.Join(work, p.OS+"_"+p.Architecture)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", dir + string(filepath.Separator)}
		for _, s := range o.Images {
			args = append(args, s.Package)
		}
		cmd := exec.CommandContext(ctx, o.Go, args...)
		cmd.Dir = o.ModuleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
		dieWithParent(cmd)
		o.Log.Info("compiling", "platform", p.String(), "packages", strings.Join(args[6:], " "))
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build for %s: %v\n%s", p, err, out)
		}
		for _, s := range o.Images {
			// go build -o DIR/ names each binary after its package's directory.
			bin := filepath.Join(dir, path.Base(s.Package))
			if _, err := os.Stat(bin); err != nil {
				return nil, fmt.Errorf("go build for %s left no binary for %s: %v", p, s.Package, err)
			}
			bins[s.Name][p] = bin
		}
	}
	return bins, nil
}
