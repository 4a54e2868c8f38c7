package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"
)

// assemble makes the image index of one Spec from its per-platform
// binaries: each image is the binary alone (no shell, no libc, nothing
// else), run as User, with the OCI labels; the index carries the labels
// as annotations too. The platforms' layers are compressed in parallel.
func assemble(s Spec, o Options, bins map[Platform]string) (v1.ImageIndex, error) {
	labels := map[string]string{
		LabelVersion:  o.Version,
		LabelRevision: o.Revision,
		LabelSource:   o.Source,
		LabelCreated:  o.Created.Format(time.RFC3339),
	}
	imgs := make([]v1.Image, len(o.Platforms))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, p := range o.Platforms {
		g.Go(func() error {
			img, err := platformImage(s.Name, bins[p], p, labels, o.Created)
			if err == nil {
				_, err = img.Digest() // compresses the layer, here in parallel
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			imgs[i] = img
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var adds []mutate.IndexAddendum
	for i, p := range o.Platforms {
		adds = append(adds, mutate.IndexAddendum{
			Add:        imgs[i],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}},
		})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

// Path is where an image's binary lives: /<name>. The injector renders
// this path as the sidecar's command.
func Path(name string) string { return "/" + name }

func platformImage(name, bin string, p Platform, labels map[string]string, created time.Time) (v1.Image, error) {
	layer, err := binaryLayer(name, bin, created)
	if err != nil {
		return nil, err
	}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: []string{Path(name)},
			User:       User,
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: fmt.Sprintf("imagebuild: %s (static, %s) at %s", name, p, Path(name)),
		},
	})
}

// binaryLayer is a gzipped tar holding the binary at /<name>, owned by
// root (the image's user may run it but not change it), mtime created.
func binaryLayer(name, bin string, created time.Time) (v1.Layer, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o755,
		Size:     int64(len(b)),
		ModTime:  created,
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
