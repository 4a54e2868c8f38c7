# tether — build, run and test. `make run` and `make test` are all the set-up
# a fresh machine needs: missing Debian packages are installed with apt-get,
# tools (helm, kube-apiserver, etcd) are built from the Go module proxy and
# cached outside the clone, keyed by version, so the second run is fast.

SHELL      := /bin/bash
GO         ?= go
BIN        := $(CURDIR)/bin
TOOLS      ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tether
export TETHER_TOOLS := $(TOOLS)

HELM_VERSION ?= v3.22.0
HELM         := $(TOOLS)/helm-$(HELM_VERSION)/helm
export TETHER_HELM := $(HELM)

.PHONY: all build run test unit e2e fmt vet deps deps-redis helm kube-tools bench bench-affinity fuzz clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/tether-sidecar ./sidecar
	$(GO) build -o $(BIN)/modelsim ./e2e/modelsim
	@if [ -f injector/main.go ]; then $(GO) build -o $(BIN)/tether-injector ./injector; fi

# The main job on an embedded default: three modelsim backends and one
# sidecar with the memory store on loopback, until Ctrl-C.
run: build
	@bash e2e/tools/run-local.sh $(BIN)

deps: deps-redis helm

# redis-server for the Redis store's integration tests.
deps-redis:
	@command -v redis-server >/dev/null || { \
	  echo "installing redis-server with apt-get"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) || \
	  { echo "error: could not install redis-server (apt-get); the Redis store tests need it" >&2; exit 1; }; }

# helm, built from the Go module proxy (never downloaded as a binary).
helm: $(HELM)
$(HELM):
	@bash e2e/tools/build-helm.sh $(HELM_VERSION) $(HELM)

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# Unit and integration tests (real redis-server, memberlist nodes, loopback HTTP).
unit: deps
	$(GO) test -race -count=1 ./...

test: vet unit e2e

# End-to-end suite on a real kube-apiserver + etcd built from Go modules.
e2e: build kube-tools helm
	@bash e2e/tools/e2e.sh

kube-tools:
	@bash e2e/tools/build-kube.sh

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Round robin vs hard vs soft affinity on a skewed multi-turn workload (~1 min).
bench-affinity:
	$(GO) run ./e2e/bench -duration 15s

# Every parser of untrusted input, FUZZTIME each.
FUZZTIME ?= 30s
FUZZ_TARGETS := \
  FuzzExtract:./sidecar/session FuzzClaim:./sidecar/jwtauth FuzzParse:./sidecar/config \
  FuzzDecode:./sidecar/store/gossip FuzzParseBinding:./sidecar/store/redisstore \
  FuzzParseRequest:./e2e/modelsim/sim FuzzParseAnnotations:./injector/inject FuzzDecodeReview:./injector/webhook
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $${t%%:*} ($${t#*:}) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) "$${t#*:}"; done

clean:
	rm -rf $(BIN)
