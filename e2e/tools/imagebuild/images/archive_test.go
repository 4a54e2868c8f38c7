package images

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeIndex assembles an index from small files standing in for the
// binaries: the assembly and the archive without compiling anything.
func fakeIndex(t *testing.T, o Options) *Result {
	t.Helper()
	dir := t.TempDir()
	bins := map[Platform]string{}
	for _, p := range o.Platforms {
		bins[p] = filepath.Join(dir, p.Architecture)
		if err := os.WriteFile(bins[p], []byte("binary for "+p.String()), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := o.Images[0]
	idx, err := assemble(s, o, bins)
	if err != nil {
		t.Fatal(err)
	}
	r := &Result{Name: s.Name, Ref: o.ref(s), Index: idx, Path: filepath.Join(dir, s.Name+".tar")}
	if r.Digest, err = idx.Digest(); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(r.Path, idx, r.Ref, o.Created); err != nil {
		t.Fatal(err)
	}
	return r
}

func testOptions(t *testing.T) Options {
	o := Options{
		ModuleDir: ".", OutDir: t.TempDir(), Images: []Spec{{"tether-sidecar", "./sidecar"}},
		Repository: "ghcr.io/tetherproxy", Version: "v1.2.3", Revision: "abc", Source: "https://example.com/x",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
	}
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestArchiveRoundTrip(t *testing.T) {
	o := testOptions(t)
	r := fakeIndex(t, o)
	a, err := ReadArchive(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if d, _ := a.Index.Digest(); d != r.Digest || a.Ref != "ghcr.io/tetherproxy/tether-sidecar:v1.2.3" {
		t.Fatalf("read back %s %s, wrote %s %s", a.Ref, d, r.Ref, r.Digest)
	}
	for _, p := range DefaultPlatforms {
		img, err := a.Image(p)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "rootfs")
		if err := Unpack(img, dir); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "tether-sidecar"))
		if err != nil || string(b) != "binary for "+p.String() {
			t.Fatalf("%s: unpacked %q, %v", p, b, err)
		}
	}
	if _, err := a.Image(Platform{"linux", "s390x"}); err == nil {
		t.Fatal("an image for a platform that was not built")
	}
	// Sub-second creation times are cut: the labels and config say seconds.
	img, err := a.Image(DefaultPlatforms[0])
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil || cf.Config.Labels[LabelCreated] != "2026-01-02T03:04:05Z" {
		t.Fatalf("created label %q (%v)", cf.Config.Labels[LabelCreated], err)
	}
}

func TestArchiveDeterministic(t *testing.T) {
	o := testOptions(t)
	a, b := fakeIndex(t, o), fakeIndex(t, o)
	ba, _ := os.ReadFile(a.Path)
	bb, _ := os.ReadFile(b.Path)
	if a.Digest != b.Digest || !bytes.Equal(ba, bb) {
		t.Fatalf("two archives of the same inputs differ: %s, %s", a.Digest, b.Digest)
	}
	o.Revision = "def"
	if c := fakeIndex(t, o); c.Digest == a.Digest {
		t.Fatal("another revision gave the same digest")
	}
}

func TestOptionsRejected(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"tag with a plus", func(o *Options) { o.Version = "v0.0.0-1+dirty" }, `version "v0.0.0-1+dirty"`},
		{"empty version", func(o *Options) { o.Version = "" }, "do not make an image reference"},
		{"uppercase repository", func(o *Options) { o.Repository = "GHCR.io/Tether" }, "do not make an image reference"},
		{"no created", func(o *Options) { o.Created = time.Time{} }, "created: required"},
		{"no revision", func(o *Options) { o.Revision = "" }, "revision: required"},
		{"no images", func(o *Options) { o.Images = nil }, "images: at least one"},
		{"same name twice", func(o *Options) { o.Images = append(o.Images, o.Images[0]) }, `"tether-sidecar" twice`},
		{"same package name", func(o *Options) { o.Images = append(o.Images, Spec{"other", "./cmd/sidecar"}) }, `two packages named "sidecar"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(t)
			c.change(&o)
			_, err := Build(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build: %v, want an error with %q", err, c.want)
			}
		})
	}
}

func TestReadArchiveRefuses(t *testing.T) {
	for name, entries := range map[string][]tar.Header{
		"a path out of the layout": {{Name: "../evil", Typeflag: tar.TypeReg}},
		"an absolute path":         {{Name: "/etc/evil", Typeflag: tar.TypeReg}},
		"a symlink":                {{Name: "index.json", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}},
		"no layout":                {{Name: "manifest.json", Typeflag: tar.TypeReg}},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, h := range entries {
				if err := tw.WriteHeader(&h); err != nil {
					t.Fatal(err)
				}
			}
			tw.Close()
			path := filepath.Join(t.TempDir(), "x.tar")
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			if a, err := ReadArchive(path); err == nil {
				a.Close()
				t.Fatal("ReadArchive accepted it")
			}
		})
	}
}
