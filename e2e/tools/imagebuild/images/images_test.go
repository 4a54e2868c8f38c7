package images_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	gobuildinfo "debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tetherproxy/tether/e2e/tools/imagebuild/images"
	"github.com/tetherproxy/tether/injector/inject"
	sidecarbuildinfo "github.com/tetherproxy/tether/sidecar/buildinfo"
)

// The inputs of the build under test, as the Makefile would pass them.
const (
	repository = "ghcr.io/tetherproxy"
	version    = "v0.0.0-imagetest"
	revision   = "0123456789abcdef0123456789abcdef01234567"
	source     = "https://github.com/tetherproxy/tether"
)

var created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var specs = []images.Spec{{Name: "tether-sidecar", Package: "./sidecar"}, {Name: "tether-injector", Package: "./injector"}}

// The images are built once per test run (cross-compiling two binaries
// for two platforms is the slow part) and shared by the tests. They are
// built the way make images builds them: by the imagebuild command, in its
// own process, so the compression is not slowed down by -race.
var (
	buildOnce sync.Once
	built     map[string]images.Result
	buildErr  error
	workDir   string
	tool      string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if workDir != "" {
		os.RemoveAll(workDir)
	}
	os.Exit(code)
}

func results(t *testing.T) map[string]images.Result {
	t.Helper()
	buildOnce.Do(func() {
		if workDir, buildErr = os.MkdirTemp("", "imagebuild-test-"); buildErr != nil {
			return
		}
		tool = filepath.Join(workDir, "imagebuild")
		cmd := exec.Command("go", "build", "-o", tool, "./e2e/tools/imagebuild")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build imagebuild: %v\n%s", err, out)
			return
		}
		start := time.Now()
		built, buildErr = buildImages(filepath.Join(workDir, "first"))
		log.Printf("images built in %v", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return built
}

// buildImages runs `imagebuild build` as the Makefile does, into out (and
// the host platform's filesystems into out/rootfs), and reads the results.
func buildImages(out string) (map[string]images.Result, error) {
	args := []string{"build", "-module", moduleRoot(), "-out", out, "-rootfs", filepath.Join(out, "rootfs"),
		"-version", version, "-revision", revision, "-created", strconv.FormatInt(created.Unix(), 10),
		"-repository", repository, "-source", source}
	for _, s := range specs {
		args = append(args, s.Name+"="+s.Package)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("imagebuild %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	rs := map[string]images.Result{}
	for _, s := range specs {
		r := images.Result{Name: s.Name, Path: filepath.Join(out, s.Name+".tar")}
		a, err := images.ReadArchive(r.Path)
		if err != nil {
			return nil, err
		}
		r.Ref, r.Digest = a.Ref, a.Entry.Digest
		a.Close()
		rs[s.Name] = r
	}
	return rs, nil
}

func moduleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func open(t *testing.T, r images.Result) *images.Archive {
	t.Helper()
	a, err := images.ReadArchive(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

var wantLabels = map[string]string{
	images.LabelVersion:  version,
	images.LabelRevision: revision,
	images.LabelSource:   source,
	images.LabelCreated:  "2026-01-02T03:04:05Z",
}

// TestArchive: the tarball is an OCI image layout whose index.json names
// one multi-platform index (what containerd, hence kind load
// image-archive, imports), plus a manifest.json that Docker's classic
// store reads; both describe the same, internally consistent images.
func TestArchive(t *testing.T) {
	for _, r := range results(t) {
		t.Run(r.Name, func(t *testing.T) {
			a := open(t, r)
			wantRef := repository + "/" + r.Name + ":" + version
			if a.Ref != wantRef || r.Ref != wantRef || a.Entry.Annotations[images.AnnotationRefName] != version {
				t.Errorf("names: recorded %q (result %q, ref.name %q), want %q", a.Ref, r.Ref, a.Entry.Annotations[images.AnnotationRefName], wantRef)
			}
			if a.Entry.Digest != r.Digest || a.Entry.MediaType != types.OCIImageIndex {
				t.Errorf("index.json entry %s %s, want %s %s", a.Entry.MediaType, a.Entry.Digest, types.OCIImageIndex, r.Digest)
			}
			// Manifests, configs, digests and sizes check out (layer
			// contents are verified, once, by imageFiles).
			if err := validate.Index(a.Index, validate.Fast); err != nil {
				t.Fatalf("invalid index: %v", err)
			}
			im, err := a.Index.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(im.Annotations, wantLabels) {
				t.Errorf("index annotations %v, want %v", im.Annotations, wantLabels)
			}
			var platforms []string
			for _, d := range im.Manifests {
				platforms = append(platforms, d.Platform.String())
				if d.MediaType != types.OCIManifestSchema1 {
					t.Errorf("%s: media type %s", d.Platform, d.MediaType)
				}
			}
			if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
				t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
			}

			// manifest.json: one entry per platform, each the index's
			// image (config and layers are its blobs), amd64 last.
			if len(a.Docker) != 2 {
				t.Fatalf("manifest.json has %d entries, want 2", len(a.Docker))
			}
			for i, e := range a.Docker {
				want := images.Platform{OS: "linux", Architecture: "arm64"}
				if i == 1 {
					want.Architecture = "amd64"
				}
				img, err := a.Image(want)
				if err != nil {
					t.Fatal(err)
				}
				m, err := img.Manifest()
				if err != nil {
					t.Fatal(err)
				}
				if e.Config != "blobs/sha256/"+m.Config.Digest.Hex || len(e.Layers) != 1 || e.Layers[0] != "blobs/sha256/"+m.Layers[0].Digest.Hex ||
					!slices.Equal(e.RepoTags, []string{wantRef}) {
					t.Errorf("manifest.json[%d] = %+v, want the %s image (config %s, layer %s) tagged %s", i, e, want, m.Config.Digest, m.Layers[0].Digest, wantRef)
				}
			}
			// ggcr's reader of docker-load tarballs finds the tag and a
			// valid image through manifest.json.
			tag, err := name.NewTag(wantRef)
			if err != nil {
				t.Fatal(err)
			}
			dimg, err := tarball.ImageFromPath(r.Path, &tag)
			if err != nil {
				t.Fatalf("not a docker-loadable tarball: %v", err)
			}
			if err := validate.Image(dimg, validate.Fast); err != nil {
				t.Fatalf("the docker view of the tarball: %v", err)
			}
		})
	}
}

// TestImageContents: each platform's image is the static binary for that
// platform at /<name> and nothing else (no shell), started as the
// entrypoint, as user 65532:65532, with the OCI labels.
func TestImageContents(t *testing.T) {
	for _, r := range results(t) {
		a := open(t, r)
		for _, p := range images.DefaultPlatforms {
			t.Run(r.Name+"/"+p.String(), func(t *testing.T) {
				img, err := a.Image(p)
				if err != nil {
					t.Fatal(err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				bin := "/" + r.Name
				if cf.OS != p.OS || cf.Architecture != p.Architecture || !cf.Created.Time.Equal(created) {
					t.Errorf("config: %s/%s created %v", cf.OS, cf.Architecture, cf.Created)
				}
				if c := cf.Config; !slices.Equal(c.Entrypoint, []string{bin}) || len(c.Cmd) != 0 || c.User != "65532:65532" || !maps.Equal(c.Labels, wantLabels) {
					t.Errorf("config: entrypoint %q cmd %q user %q labels %v; want [%s], none, 65532:65532, %v", c.Entrypoint, c.Cmd, c.User, c.Labels, bin, wantLabels)
				}
				files := imageFiles(t, r, p)
				if names := slices.Sorted(maps.Keys(files)); !slices.Equal(names, []string{r.Name}) {
					t.Fatalf("image files %v, want only %s (no shell, nothing else)", names, r.Name)
				}
				f := files[r.Name]
				if f.hdr.Typeflag != tar.TypeReg || f.hdr.Mode != 0o755 || f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(created) {
					t.Errorf("%s: type %c mode %o owner %d:%d mtime %v; want a root-owned 0755 file with mtime %v",
						bin, f.hdr.Typeflag, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime, created)
				}
				checkStaticELF(t, f.data, p)
				checkGoBuild(t, r.Name, f.data, p)
			})
		}
	}
}

type file struct {
	hdr  *tar.Header
	data []byte
}

var filesCache sync.Map // "<image> <platform>" → map[string]file

// imageFiles is the flattened filesystem of r's image for p, read once
// per test run; reading it verifies the layer against its digest (the
// compressed bytes) and diff ID (the tar).
func imageFiles(t *testing.T, r images.Result, p images.Platform) map[string]file {
	t.Helper()
	key := r.Name + " " + p.String()
	if f, ok := filesCache.Load(key); ok {
		return f.(map[string]file)
	}
	a := open(t, r)
	img, err := a.Image(p)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want one", len(layers), err)
	}
	l := layers[0]
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zsum, tsum := sha256.New(), sha256.New()
	zr, err := gzip.NewReader(io.TeeReader(rc, zsum))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]file{}
	tr := tar.NewReader(io.TeeReader(zr, tsum))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, hdr.Size)
		if _, err := io.ReadFull(tr, b); err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(hdr.Name, "/")] = file{hdr, b}
	}
	io.Copy(io.Discard, zr) // the tar's padding, for the diff ID
	io.Copy(io.Discard, rc)
	// What the manifest and the config say, not what ggcr would compute.
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil || len(cf.RootFS.DiffIDs) != 1 {
		t.Fatalf("config: %v, diff IDs %v", err, cf.RootFS.DiffIDs)
	}
	if got, want := hex.EncodeToString(zsum.Sum(nil)), m.Layers[0].Digest.Hex; got != want {
		t.Fatalf("layer sha256 %s, the manifest says %s", got, want)
	}
	if got, want := hex.EncodeToString(tsum.Sum(nil)), cf.RootFS.DiffIDs[0].Hex; got != want {
		t.Fatalf("layer tar sha256 %s, the config's diff ID says %s", got, want)
	}
	filesCache.Store(key, files)
	return files
}

// checkStaticELF: an executable for the platform, with no interpreter and
// no dynamic section (CGO_ENABLED=0: it runs on an empty filesystem).
func checkStaticELF(t *testing.T, b []byte, p images.Platform) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not an ELF binary: %v", err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	if f.Machine != want || f.Type != elf.ET_EXEC {
		t.Errorf("ELF %v %v, want an executable for %v", f.Type, f.Machine, want)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("dynamically linked (%v): not a static binary", prog.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("has a symbol table: not stripped (-s -w)")
	}
}

// checkGoBuild reads the Go build information of the binary: built
// with the flags the images promise (with -trimpath Go does not record
// -ldflags; --version shows the stamp), and the sidecar carries fallback
// CA roots (the image has no CA bundle; Redis over TLS needs them).
func checkGoBuild(t *testing.T, name string, b []byte, p images.Platform) {
	t.Helper()
	bi, err := gobuildinfo.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("no Go build information: %v", err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": p.OS, "GOARCH": p.Architecture} {
		if settings[k] != v {
			t.Errorf("built with %s=%q, want %q", k, settings[k], v)
		}
	}
	if name != "tether-sidecar" {
		return
	}
	for _, d := range bi.Deps {
		if d.Path == "golang.org/x/crypto/x509roots/fallback" {
			return
		}
	}
	t.Error("the sidecar does not carry golang.org/x/crypto/x509roots/fallback: Redis TLS cannot verify a server in an image without CA certificates")
}

// hostRootfs is where the build unpacked each image's host platform
// filesystem (imagebuild build -rootfs, as make images does).
func hostRootfs(t *testing.T) map[string]string {
	t.Helper()
	results(t)
	fs := map[string]string{}
	for _, s := range specs {
		fs[s.Name] = filepath.Join(workDir, "first", "rootfs", s.Name)
		if _, err := os.Stat(filepath.Join(fs[s.Name], s.Name)); err != nil {
			t.Fatalf("the host platform's %s was not unpacked: %v", s.Name, err)
		}
	}
	return fs
}

// TestRunFromImage runs the binaries from the host platform's unpacked
// image: --version names the stamped build, and --check accepts the
// config the injector renders for the README's router.
func TestRunFromImage(t *testing.T) {
	fs := hostRootfs(t)
	for _, n := range []string{"tether-sidecar", "tether-injector"} {
		out, err := exec.Command(filepath.Join(fs[n], n), "--version").CombinedOutput()
		want := fmt.Sprintf("%s %s (revision %s, %s)\n", n, version, revision, runtime.Version())
		if err != nil || string(out) != want {
			t.Errorf("%s --version: %v, %q; want %q", n, err, out, want)
		}
	}

	sidecar := filepath.Join(fs["tether-sidecar"], "tether-sidecar")
	rendered := injectedRouter(t)
	var env string
	for _, e := range rendered.Env {
		if e.Name == inject.EnvConfig {
			env = inject.ExpandKubeletEnv(e.Value, map[string]string{"POD_IP": "10.0.0.1"})
		}
	}
	cmd := exec.Command(sidecar, "--check")
	cmd.Env = append(os.Environ(), inject.EnvConfig+"="+env)
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "config ok\n" {
		t.Errorf("--check on the injected config: %v, %q", err, out)
	}
	// --check really validates: a broken config fails with the field named.
	cmd = exec.Command(sidecar, "--check")
	cmd.Env = append(os.Environ(), inject.EnvConfig+"="+strings.Replace(env, "X-Session-ID", "", 1))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "sessionSticky.sources[0]") {
		t.Errorf("--check on a config without a header name: %v, %q; want an error naming the source", err, out)
	}
}

// TestSidecarServesBuildInfo starts the image's sidecar and reads
// tether_build_info from its /metrics: the stamped build, end to end.
func TestSidecarServesBuildInfo(t *testing.T) {
	sidecar := filepath.Join(hostRootfs(t)["tether-sidecar"], "tether-sidecar")
	cfg := filepath.Join(t.TempDir(), "tether.yaml")
	err := os.WriteFile(cfg, []byte(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: test/pool
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: ["127.0.0.1:1"]}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sidecar, "--config", cfg)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	admin, lines := "", []string{}
	sc := bufio.NewScanner(stderr)
	for admin == "" && sc.Scan() {
		lines = append(lines, sc.Text())
		var l struct{ Msg, Admin string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "tether-sidecar serving" {
			admin = l.Admin
		}
	}
	if admin == "" {
		t.Fatalf("the sidecar did not start serving:\n%s", strings.Join(lines, "\n"))
	}
	go io.Copy(io.Discard, stderr)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("tether_build_info{goversion=%q,revision=%q,version=%q} 1\n", runtime.Version(), revision, version)
	if !strings.Contains(string(body), want) {
		t.Fatalf("/metrics lacks %s", want)
	}
}

// injectedRouter is the sidecar container the injector renders for the
// README's router: a Deployment "router" in a labelled namespace "llm",
// annotated by the `kubectl patch` of "Install on a cluster".
func injectedRouter(t *testing.T) corev1.Container {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "\n## Install on a cluster\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	var patch string
	for _, l := range strings.Split(sec, "\n") {
		if strings.HasPrefix(l, "kubectl -n llm patch deployment router ") {
			_, patch, _ = strings.Cut(l, " -p '")
			patch = strings.TrimSuffix(patch, "'")
		}
	}
	var d appsv1.Deployment
	if err := json.Unmarshal([]byte(patch), &d); err != nil || len(d.Spec.Template.Annotations) == 0 {
		t.Fatalf("no `kubectl -n llm patch deployment router … -p '{…}'` with annotations in the README's install section: %v (%q)", err, patch)
	}
	// The chart's defaults that the README's helm line keeps: the gossip
	// key Secret it creates in the namespaces of sidecar.gossip.namespaces.
	inj, err := inject.New(inject.Options{Image: repository + "/tether-sidecar:" + version, GossipKeySecret: "tether-gossip-key"})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "router", Image: "router"}}}}
	pod.Namespace, pod.GenerateName = "llm", "router-5d8f7c9b4-"
	pod.Labels = map[string]string{"app": "router", "pod-template-hash": "5d8f7c9b4"}
	res, err := inj.Inject(pod, inject.Request{Namespace: "llm", NamespaceSelected: true})
	if err != nil || res.Pod == nil {
		t.Fatalf("the README's router is not injected: %v (%s)", err, res.Skip)
	}
	for _, c := range append(res.Pod.Spec.InitContainers, res.Pod.Spec.Containers...) {
		if c.Name == inject.ContainerName {
			return c
		}
	}
	t.Fatal("no injected sidecar for the README's router")
	return corev1.Container{}
}

// TestInjectedCommandInImage: the command the injector renders for the
// sidecar is the binary of the sidecar image on every platform, and the
// image's numeric non-root user satisfies the rendered runAsNonRoot.
func TestInjectedCommandInImage(t *testing.T) {
	c := injectedRouter(t)
	if len(c.Command) == 0 {
		t.Fatal("the injector renders no command")
	}
	for _, p := range images.DefaultPlatforms {
		files := imageFiles(t, results(t)["tether-sidecar"], p)
		f, ok := files[strings.TrimPrefix(c.Command[0], "/")]
		if !ok || f.hdr.Mode&0o111 == 0 {
			t.Errorf("%s: the injected command %q is not an executable of the image (files: %v)", p, c.Command[0], slices.Collect(maps.Keys(files)))
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || (sc.RunAsUser != nil && *sc.RunAsUser == 0) {
		t.Errorf("injected securityContext %+v: want runAsNonRoot", sc)
	}
}

// TestPushPull pushes the tarballs to a registry on loopback (ggcr's
// pkg/registry) the way make push does and pulls back the same digests.
func TestPushPull(t *testing.T) {
	rs := results(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range rs {
		ref, d, err := images.PushArchive(ctx, r.Path, host+"/team/", "")
		if err != nil {
			t.Fatal(err)
		}
		if want := host + "/team/" + r.Name + ":" + version; ref != want || d != r.Digest {
			t.Errorf("pushed %s@%s, want %s@%s", ref, d, want, r.Digest)
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(tag, remote.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := idx.Digest(); err != nil || got != r.Digest {
			t.Errorf("pulled %s: digest %s (%v), want %s", ref, got, err, r.Digest)
		}
		arm := v1.Platform{OS: "linux", Architecture: "arm64"}
		img, err := remote.Image(tag, remote.WithContext(ctx), remote.WithPlatform(arm))
		if err != nil {
			t.Fatal(err)
		}
		a := open(t, r)
		local, err := a.Image(images.Platform{OS: "linux", Architecture: "arm64"})
		if err != nil {
			t.Fatal(err)
		}
		gd, _ := img.Digest()
		ld, _ := local.Digest()
		if gd != ld {
			t.Errorf("%s for linux/arm64: pulled %s, built %s", ref, gd, ld)
		}
	}
}

// TestReproducible: building the same inputs again (compiling, linking,
// assembling) gives the same digests and byte-identical tarballs.
func TestReproducible(t *testing.T) {
	first := results(t)
	second, err := buildImages(filepath.Join(workDir, "second"))
	if err != nil {
		t.Fatal(err)
	}
	for n, r := range second {
		if r.Digest != first[n].Digest {
			t.Errorf("%s: digest %s, first build %s", n, r.Digest, first[n].Digest)
		}
		if a, b := fileSum(t, r.Path), fileSum(t, first[n].Path); a != b {
			t.Errorf("%s: tarball sha256 %s, first build %s", n, a, b)
		}
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestDockerfile: the Dockerfile, which CI cannot build, makes images of
// the same shape as make images: the same binary paths, entrypoints,
// user, labels and build flags.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	want := []string{
		"CGO_ENABLED=0", "go build -trimpath", `-ldflags "-s -w ` + sidecarbuildinfo.LDFlags("$VERSION", "$REVISION") + `"`,
		"USER " + images.User,
	}
	for _, l := range slices.Sorted(maps.Keys(wantLabels)) {
		want = append(want, l+"=")
	}
	for _, s := range specs {
		want = append(want,
			"FROM scratch AS "+s.Name,
			fmt.Sprintf("COPY --from=build /out/%s /%s", filepath.Base(s.Package), s.Name),
			fmt.Sprintf(`ENTRYPOINT ["/%s"]`, s.Name))
	}
	for _, w := range want {
		if !strings.Contains(df, w) {
			t.Errorf("the Dockerfile lacks %q", w)
		}
	}
}
