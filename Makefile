# tether — build, run and test. `make run` and `make test` are all the set-up
# a fresh machine needs: missing Debian packages are installed with apt-get,
# tools (helm, kube-apiserver, etcd) are built from the Go module proxy and
# cached outside the clone, keyed by version, so the second run is fast.

SHELL      := /bin/bash
GO         ?= go
BIN        := $(CURDIR)/bin
TOOLS      ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tether
export TETHER_TOOLS := $(TOOLS)

# The version stamped into both binaries (--version, tether_build_info)
# and the images' tag: `git describe --tags --always --dirty`. On a release
# tag that is the tag (v0.1.0, which is also the chart's appVersion and so
# its default image tag); after it v0.1.0-3-g1a2b3c4; with no tag at all
# the abbreviated commit (1a2b3c4); "-dirty" marks uncommitted changes.
# `make VERSION=v0.1.0-rc.1 images` overrides it.
VERSION    := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION   := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The images' creation time (and their files' mtime): the commit's time,
# so the same commit gives the same image digests.
CREATED    := $(or $(SOURCE_DATE_EPOCH),$(shell git log -1 --format=%ct 2>/dev/null),$(shell date +%s))
BUILDINFO  := github.com/tetherproxy/tether/sidecar/buildinfo
LDFLAGS    := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION)

# Images: NAME=PACKAGE; the name is the image's and its binary's (/NAME).
IMAGES      := tether-sidecar=./sidecar tether-injector=./injector
IMAGE_NAMES := $(foreach i,$(IMAGES),$(firstword $(subst =, ,$(i))))
# Repository prefix of the names recorded in the tarballs (what docker load
# and kind load image-archive call them); the chart's default.
IMAGE_REPO  ?= ghcr.io/tetherproxy
IMAGEBUILD  := $(GO) run ./e2e/tools/imagebuild

# staticcheck, run by `make vet` beside go vet (bugs, dead code,
# deprecated calls), installed from the Go module proxy into the cache.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK         := $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

HELM_VERSION ?= v3.22.0
HELM         := $(TOOLS)/helm-$(HELM_VERSION)/helm
export TETHER_HELM := $(HELM)

.PHONY: all build images push push-registry version run test unit e2e fmt vet deps deps-redis deps-prometheus deps-bench dashboard-png helm kube-tools chaos soak bench bench-quick bench-hop bench-go bench-affinity fuzz clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/tether-sidecar ./sidecar
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/modelsim ./e2e/modelsim
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/tether-injector ./injector

# Both images as OCI image tarballs, bin/images/<name>.tar (linux/amd64 and
# linux/arm64 in one index; docker load, kind load image-archive), built by
# go-containerregistry without a Docker daemon or a base image, and the
# host platform's image filesystem unpacked in bin/images/rootfs/<name>/
# (the e2e suite runs the binaries from there).
images:
	@mkdir -p $(BIN)/images
	$(IMAGEBUILD) build -out $(BIN)/images -rootfs $(BIN)/images/rootfs \
	  -version $(VERSION) -revision $(REVISION) -created $(CREATED) -repository $(IMAGE_REPO) $(IMAGES)

# make push REGISTRY=host/path: the images to REGISTRY/<name>:$(VERSION),
# with the credentials of docker login / credential helpers.
push: push-registry images
	$(IMAGEBUILD) push -registry $(REGISTRY) -tag $(VERSION) $(foreach n,$(IMAGE_NAMES),$(BIN)/images/$(n).tar)

push-registry:
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=host/path (pushes REGISTRY/<image>:$(VERSION))" >&2; exit 2; }

# The version make build, make images and make push stamp and tag.
version:
	@echo $(VERSION)

# The main job on an embedded default: three modelsim backends and one
# sidecar with the memory store on loopback, until Ctrl-C.
run: build
	@bash e2e/tools/run-local.sh $(BIN)

deps: deps-redis deps-prometheus helm

# redis-server for the Redis store's integration tests.
deps-redis:
	@command -v redis-server >/dev/null || { \
	  echo "installing redis-server with apt-get"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) || \
	  { echo "error: could not install redis-server (apt-get); the Redis store tests need it" >&2; exit 1; }; }

# prometheus and promtool: e2e/observe checks the dashboard and the alerts
# against a real Prometheus.
deps-prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  echo "installing prometheus with apt-get"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) || \
	  { echo "error: could not install prometheus (apt-get); the dashboard and alert tests need it" >&2; exit 1; }; }

# The dashboard's main panels as PNG (docs/dashboard/), from a real
# Prometheus scraping sidecars, modelsim backends and an injector under
# load for DASHBOARD_LOAD (~1.5 min); the README shows them.
DASHBOARD_LOAD ?= 75s
dashboard-png: deps-redis deps-prometheus
	$(GO) test -count=1 -timeout 10m -run '^TestAgainstPrometheus$$' ./e2e/observe -args -png $(CURDIR)/docs/dashboard -load $(DASHBOARD_LOAD)

# The side-by-side benchmarks run real HAProxy and nginx (and redis-server).
deps-bench: deps-redis
	@command -v haproxy >/dev/null && command -v nginx >/dev/null || { \
	  echo "installing haproxy and nginx with apt-get"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy nginx >/dev/null) || \
	  { echo "error: could not install haproxy and nginx (apt-get); the benchmarks compare tether with them" >&2; exit 1; }; }

# helm, built from the Go module proxy (never downloaded as a binary).
helm: $(HELM)
$(HELM):
	@bash e2e/tools/build-helm.sh $(HELM_VERSION) $(HELM)

fmt:
	gofmt -w $$(git ls-files '*.go')

vet: $(STATICCHECK)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Unit and integration tests (real redis-server, memberlist nodes, loopback HTTP).
unit: deps
	$(GO) test -race -count=1 ./...

# images before unit: its cold cross-compiles (two platforms) run here,
# outside go test's timeout, and the images test then only links.
test: vet images unit e2e

# End-to-end suite on a real kube-apiserver + etcd built from Go modules;
# tether-sidecar and tether-injector run from their images' filesystems.
e2e: build images kube-tools helm
	@bash e2e/tools/e2e.sh

kube-tools:
	@bash e2e/tools/build-kube.sh

# The chaos suite (a few minutes on 2 cores): steady streaming load through
# three real tether-sidecar replicas over modelsim backends while each test
# injects one fault (a replica killed, Redis down, the gossip ring cut, a
# backend killed mid-stream, faulty backends, a replica drained). Writes
# e2e/chaos/RESULTS.md and the README's Reliability table. See README
# "Reliability".
chaos: build deps-redis
	$(GO) test -tags chaos -count=1 -timeout 15m -v ./e2e/chaos/

# The load test in full (~20 min on 2 cores, not in CI): 1,000,000 distinct
# sessions through one replica with maxEntries 100,000, then through a
# 3-replica gossip ring; goroutines, open fds, heap and latency sampled
# every tenth. Writes e2e/chaos/SOAK.md and the README's soak block.
soak: build
	CHAOS_REPORT=soak $(GO) test -tags chaos,soak -count=1 -timeout 60m -v -run TestSoak ./e2e/chaos/

# The benchmarks side by side with HAProxy, nginx and the routing policies
# users run today (~13 min on 2 cores): writes e2e/bench/REPORT.md, its
# charts and the README's headline table. See README "Benchmarks". The
# affinity bench (AFFINITY.md) is make bench-affinity.
bench: build deps-bench
	$(GO) build -o $(BIN)/bench ./e2e/bench
	$(BIN)/bench all

# A reduced run of every section, the affinity bench's included (~2 min,
# part of CI): fails if a proxy, policy or store does not work; asserts no
# performance figure.
bench-quick: build deps-bench
	$(GO) build -o $(BIN)/bench ./e2e/bench
	$(BIN)/bench all -quick

# One hop: direct vs HAProxy vs nginx vs tether (access log on and off),
# CPU per 1,000 requests, p50/p99/p99.9 at 2,000 and 5,000 requests/s
# (streamed: 200 and 500), highest rate at p99 added over direct < 5 ms (~2 min).
# HOP_FLAGS adds flags, e.g. HOP_FLAGS='-proxies direct,haproxy,tether -max-rate=false'.
bench-hop: build deps-bench
	$(GO) build -o $(BIN)/bench ./e2e/bench
	$(BIN)/bench hop $(HOP_FLAGS)

# The Go micro-benchmarks of every package (testing.B).
bench-go: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Round robin, hard, threshold soft, cost soft affinity and the global-map
# oracle on a skewed multi-turn workload under cache pressure (~3.5 min);
# writes e2e/bench/AFFINITY.md.
bench-affinity:
	$(GO) run ./e2e/bench affinity

# Every parser of untrusted input, FUZZTIME each: every Fuzz function of
# the module, found rather than listed (a list left FuzzParse of
# sidecar/loadscrape out), as Name:./package. Expanded only by make fuzz
# (=, not :=), so no other target pays for the search.
FUZZTIME ?= 30s
FUZZ_TARGETS = $(shell grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' sidecar injector e2e | \
  sed -E 's|^(.*)/[^/]*_test.go:func (Fuzz[A-Za-z0-9_]*)$$|\2:./\1|' | sort -u)
fuzz:
	@GO="$(GO)" bash e2e/tools/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

clean:
	rm -rf $(BIN)
