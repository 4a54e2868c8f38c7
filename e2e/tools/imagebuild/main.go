// Command imagebuild builds, unpacks and pushes tether's container images
// without a Docker daemon (see package images). The Makefile runs it:
//
//	imagebuild build  -out bin/images -rootfs bin/images/rootfs -version V -revision R -created UNIX \
//	                  -repository ghcr.io/tetherproxy tether-sidecar=./sidecar tether-injector=./injector
//	imagebuild unpack -platform linux/amd64 bin/images/tether-sidecar.tar bin/images/rootfs/tether-sidecar
//	imagebuild push   -registry host/path bin/images/tether-sidecar.tar …
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/e2e/tools/imagebuild/images"
)

const usage = `usage:
  imagebuild build  [flags] NAME=PACKAGE...   build images into -out (one OCI tarball each)
  imagebuild unpack [flags] TARBALL DIR       write one platform's filesystem into DIR
  imagebuild push   [flags] TARBALL...        push each tarball's index to REGISTRY/NAME:TAG
Run "imagebuild COMMAND -h" for the flags.`

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "build":
		err = build(ctx, log, args)
	case "unpack":
		err = unpack(args)
	case "push":
		err = push(ctx, log, args)
	default:
		err = fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("imagebuild build", flag.ExitOnError)
	o := images.Options{Log: log}
	var created int64
	var platforms, rootfs string
	fs.StringVar(&o.OutDir, "out", "bin/images", "directory for the tarballs (<name>.tar)")
	fs.StringVar(&rootfs, "rootfs", "", "if set, also unpack the host platform's image of each into ROOTFS/<name>/")
	fs.StringVar(&o.ModuleDir, "module", ".", "the Go module's root")
	fs.StringVar(&o.Version, "version", "", "image tag and the binaries' --version (git describe --tags --always --dirty)")
	fs.StringVar(&o.Revision, "revision", "", "full commit hash")
	fs.Int64Var(&created, "created", 0, "creation time, Unix seconds (the commit's time: git log -1 --format=%ct)")
	fs.StringVar(&o.Repository, "repository", "ghcr.io/tetherproxy", "repository prefix of the names recorded in the tarballs")
	fs.StringVar(&o.Source, "source", "https://github.com/tetherproxy/tether", "org.opencontainers.image.source label")
	fs.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated OS/ARCH list")
	_ = fs.Parse(args)
	if created <= 0 {
		return errors.New("-created: required, Unix seconds > 0")
	}
	o.Created = time.Unix(created, 0)
	var err error
	if o.Platforms, err = parsePlatforms(platforms); err != nil {
		return err
	}
	for _, a := range fs.Args() {
		n, pkg, ok := strings.Cut(a, "=")
		if !ok || n == "" || !strings.HasPrefix(pkg, "./") {
			return fmt.Errorf("%q: want NAME=./PACKAGE", a)
		}
		o.Images = append(o.Images, images.Spec{Name: n, Package: pkg})
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	res, err := images.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, r := range res {
		fmt.Printf("%s %s@%s\n", r.Path, r.Ref, r.Digest)
		if rootfs != "" {
			if err := unpackArchive(r.Path, hostPlatform(), filepath.Join(rootfs, r.Name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostPlatform is the Linux platform of this machine's architecture.
func hostPlatform() images.Platform {
	return images.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

func unpack(args []string) error {
	fs := flag.NewFlagSet("imagebuild unpack", flag.ExitOnError)
	platform := fs.String("platform", hostPlatform().String(), "OS/ARCH of the image to unpack")
	_ = fs.Parse(args)
	if fs.NArg() != 2 {
		return errors.New("unpack: want TARBALL DIR")
	}
	ps, err := parsePlatforms(*platform)
	if err != nil {
		return err
	}
	return unpackArchive(fs.Arg(0), ps[0], fs.Arg(1))
}

func unpackArchive(path string, p images.Platform, dir string) error {
	a, err := images.ReadArchive(path)
	if err != nil {
		return err
	}
	defer a.Close()
	img, err := a.Image(p)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return images.Unpack(img, dir)
}

func push(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("imagebuild push", flag.ExitOnError)
	registry := fs.String("registry", "", "where to push: host[:port]/path; each image goes to REGISTRY/NAME:TAG")
	tag := fs.String("tag", "", "the tag (default: the one recorded in the tarball, the version it was built with)")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit for each image's upload")
	_ = fs.Parse(args)
	if *registry == "" || fs.NArg() == 0 {
		return errors.New("push: want -registry host/path and at least one TARBALL")
	}
	for _, path := range fs.Args() {
		pctx, cancel := context.WithTimeout(ctx, *timeout)
		ref, d, err := images.PushArchive(pctx, path, *registry, *tag)
		cancel()
		if err != nil {
			return err
		}
		log.Info("pushed", "image", ref, "digest", d.String())
		fmt.Printf("%s@%s\n", ref, d)
	}
	return nil
}

func parsePlatforms(s string) ([]images.Platform, error) {
	var ps []images.Platform
	for _, f := range strings.Split(s, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("platform %q: want OS/ARCH (linux/amd64)", f)
		}
		ps = append(ps, images.Platform{OS: os, Architecture: arch})
	}
	return ps, nil
}
