package images

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations of the index.json entry that name the image for loaders:
// containerd (kind load image-archive, Docker's containerd image store)
// reads the first, the OCI spec defines the second (the tag alone).
const (
	AnnotationContainerdName = "io.containerd.image.name"
	AnnotationRefName        = "org.opencontainers.image.ref.name"
)

// DockerManifestEntry is one entry of manifest.json, the file Docker's
// classic image store reads on `docker load` (it ignores index.json).
type DockerManifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteArchive writes idx as an OCI image-layout tarball at path:
// oci-layout, index.json (one entry: idx, named ref), blobs/sha256/…, and
// a docker-compatible manifest.json whose entries point into blobs/. Every
// tar header has a fixed mode, owner root and mtime created, and the
// entries are in a fixed order, so equal inputs give equal bytes.
//
// manifest.json lists one entry per platform, all tagged ref. Docker's
// classic store loads every entry and the tag ends on the last one, so
// linux/amd64 (the most common host) comes last; `docker load --platform`
// picks another. containerd and Docker's containerd store use index.json
// and pick the host's platform from the index.
func WriteArchive(path string, idx v1.ImageIndex, ref string, created time.Time) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		AnnotationContainerdName: tag.String(),
		AnnotationRefName:        tag.TagStr(),
	})); err != nil {
		return err
	}
	mf, err := dockerManifest(idx, tag.String())
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mf, 0o644); err != nil {
		return err
	}
	return tarDir(dir, path, created)
}

func dockerManifest(idx v1.ImageIndex, ref string) ([]byte, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	descs := slices.Clone(im.Manifests)
	slices.SortStableFunc(descs, func(a, b v1.Descriptor) int {
		return boolInt(isAMD64(a)) - boolInt(isAMD64(b))
	})
	var entries []DockerManifestEntry
	for _, d := range descs {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		e := DockerManifestEntry{Config: blobPath(m.Config.Digest), RepoTags: []string{ref}}
		for _, l := range m.Layers {
			e.Layers = append(e.Layers, blobPath(l.Digest))
		}
		entries = append(entries, e)
	}
	return json.Marshal(entries)
}

func isAMD64(d v1.Descriptor) bool { return d.Platform != nil && d.Platform.Architecture == "amd64" }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// tarDir writes dir's tree to path (through a temporary file, renamed
// when complete): the layout's metadata files first, then directories
// and blobs in lexical order.
func tarDir(dir, path string, mtime time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		names = append(names, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return err
	}
	first := []string{"oci-layout", "index.json", "manifest.json"}
	slices.SortFunc(names, func(a, b string) int {
		ia, ib := slices.Index(first, a), slices.Index(first, b)
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		return strings.Compare(a, b)
	})

	tmp, err := os.CreateTemp(filepath.Dir(path), ".archive-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	tw := tar.NewWriter(tmp)
	for _, n := range names {
		if err := addFile(tw, filepath.Join(dir, filepath.FromSlash(n)), n, mtime); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := errors.Join(tw.Close(), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func addFile(tw *tar.Writer, src, name string, mtime time.Time) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: name, ModTime: mtime, Format: tar.FormatUSTAR}
	switch {
	case st.IsDir():
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", 0o755
		return tw.WriteHeader(hdr)
	case st.Mode().IsRegular():
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, st.Size()
	default:
		return fmt.Errorf("%s: not a file or directory", name)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
