// Package images builds tether's container images without a Docker
// daemon and without pulling a base image: each image is one layer holding
// one static Go binary, for every platform of one OCI image index, written
// as an OCI image-layout tarball that `docker load` and
// `kind load image-archive` accept. Everything in it (layer tar headers,
// config, manifests, the tarball itself) is fixed by the inputs, so the
// same commit gives the same digests and the same bytes.
//
// The Makefile drives it through e2e/tools/imagebuild (make images,
// make push); the tests call it directly.
package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Spec is one image: Name is the image's last path element and the
// binary's name (at /Name in the image); Package is the main package,
// relative to the module (./sidecar).
type Spec struct {
	Name    string
	Package string
}

// Platform of one image in the index.
type Platform struct {
	OS, Architecture string
}

func (p Platform) String() string { return p.OS + "/" + p.Architecture }

// DefaultPlatforms are the platforms every image is built for.
var DefaultPlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}

// User is the numeric user and group the images run as (distroless'
// "nonroot"): the injected sidecar's securityContext requires a non-root
// user, and a number needs no /etc/passwd in the image.
const User = "65532:65532"

// OCI label (and index annotation) keys.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelCreated  = "org.opencontainers.image.created"
)

// Options of Build.
type Options struct {
	// ModuleDir is the Go module's root, where `go build` runs.
	ModuleDir string
	// OutDir receives <name>.tar for each image.
	OutDir string
	Images []Spec
	// Platforms default to DefaultPlatforms.
	Platforms []Platform
	// Repository prefixes the image names recorded in the tarballs
	// (ghcr.io/tetherproxy → ghcr.io/tetherproxy/tether-sidecar:<Version>):
	// the name `docker load` and `kind load image-archive` give them.
	Repository string
	// Version is the image tag and the binaries' --version; Revision the
	// full commit hash. Both go into the binaries and the labels.
	Version, Revision string
	// Created is the images' creation time, in their config and labels
	// and as every file's mtime: the commit's time, so a rebuild of the
	// same commit gives the same digests.
	Created time.Time
	// Source is the org.opencontainers.image.source label.
	Source string
	// Go is the go command; default "go" from PATH.
	Go  string
	Log *slog.Logger
}

// Result is one written image.
type Result struct {
	Name string
	// Path of the OCI image-layout tarball.
	Path string
	// Ref is the name recorded in the tarball (Repository/Name:Version).
	Ref string
	// Digest of the image index: what a registry serves for Ref.
	Digest v1.Hash
	Index  v1.ImageIndex
}

// Build compiles every image's binary for every platform and writes one
// tarball per image into OutDir.
func Build(ctx context.Context, o Options) ([]Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(o.OutDir, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	bins, err := compile(ctx, o, work)
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, s := range o.Images {
		idx, err := assemble(s, o, bins[s.Name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		r := Result{Name: s.Name, Path: filepath.Join(o.OutDir, s.Name+".tar"), Ref: o.ref(s), Index: idx}
		if r.Digest, err = idx.Digest(); err != nil {
			return nil, err
		}
		if err := WriteArchive(r.Path, idx, r.Ref, o.Created); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		o.Log.Info("image written", "image", r.Ref, "digest", r.Digest.String(), "path", r.Path)
		results = append(results, r)
	}
	return results, nil
}

func (o *Options) ref(s Spec) string { return o.Repository + "/" + s.Name + ":" + o.Version }

func (o *Options) check() error {
	var errs []error
	if o.ModuleDir == "" {
		errs = append(errs, errors.New("module directory: required"))
	}
	if o.OutDir == "" {
		errs = append(errs, errors.New("output directory: required"))
	}
	if len(o.Images) == 0 {
		errs = append(errs, errors.New("images: at least one name=package is required"))
	}
	if o.Revision == "" {
		errs = append(errs, errors.New("revision: required"))
	}
	if o.Source == "" {
		errs = append(errs, errors.New("source: required"))
	}
	if o.Created.IsZero() {
		errs = append(errs, errors.New("created: required (the commit's time)"))
	}
	seen, outputs := map[string]bool{}, map[string]bool{}
	for _, s := range o.Images {
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("images: %q twice", s.Name))
		}
		seen[s.Name] = true
		// go build -o DIR/ names a binary after its package's directory.
		if outputs[path.Base(s.Package)] {
			errs = append(errs, fmt.Errorf("images: two packages named %q", path.Base(s.Package)))
		}
		outputs[path.Base(s.Package)] = true
		// The tag and the repository must make a valid reference.
		if _, err := name.NewTag(o.ref(s), name.StrictValidation); err != nil {
			errs = append(errs, fmt.Errorf("image %s: repository %q and version %q do not make an image reference: %v", s.Name, o.Repository, o.Version, err))
		}
	}
	if len(o.Platforms) == 0 {
		o.Platforms = DefaultPlatforms
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Created = o.Created.UTC().Truncate(time.Second)
	return errors.Join(errs...)
}
