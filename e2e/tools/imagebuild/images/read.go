package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Archive is a tarball of WriteArchive, opened: the image index and its
// name, read through ggcr's layout package from a temporary copy of the
// layout. Close removes the copy.
type Archive struct {
	// Index is the image index (one image per platform).
	Index v1.ImageIndex
	// Ref is the name in index.json (io.containerd.image.name).
	Ref string
	// Entry is index.json's one descriptor: the index, with its annotations.
	Entry v1.Descriptor
	// Docker is manifest.json.
	Docker []DockerManifestEntry
	// Dir is the unpacked layout.
	Dir string
}

// ReadArchive opens a tarball written by WriteArchive. It refuses
// anything else: a layout whose index.json has not exactly one image
// index, or tar entries that are not plain files and directories inside
// the layout.
func ReadArchive(path string) (_ *Archive, err error) {
	dir, err := os.MkdirTemp("", "imagebuild-layout-")
	if err != nil {
		return nil, err
	}
	a := &Archive{Dir: dir}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := untar(path, dir); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: not an OCI image layout: %w", path, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("%s: index.json should list one image index, lists %d entries", path, len(im.Manifests))
	}
	a.Entry = im.Manifests[0]
	a.Ref = a.Entry.Annotations[AnnotationContainerdName]
	if a.Index, err = top.ImageIndex(a.Entry.Digest); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(b, &a.Docker); err != nil {
		return nil, fmt.Errorf("%s: manifest.json: %w", path, err)
	}
	return a, nil
}

// Close removes the temporary layout.
func (a *Archive) Close() error { return os.RemoveAll(a.Dir) }

// Image returns the index's image for platform p.
func (a *Archive) Image(p Platform) (v1.Image, error) {
	im, err := a.Index.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == p.OS && d.Platform.Architecture == p.Architecture {
			return a.Index.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s in the index", p)
}

func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return extractTar(tar.NewReader(f), dir)
}

// extractTar writes the plain files and directories of tr under dir; any
// other entry, or a name that would leave dir, is an error.
func extractTar(tr *tar.Reader, dir string) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("entry %q leaves the directory", hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := writeFile(target, tr, hdr.FileInfo().Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %q is neither a file nor a directory", hdr.Name, hdr.Typeflag)
		}
	}
}

func writeFile(path string, r io.Reader, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}
