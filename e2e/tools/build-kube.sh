#!/usr/bin/env bash
# build-kube.sh — builds the e2e control plane (kube-apiserver and etcd) from the
# Go module proxy (never a downloaded binary) into the tool cache:
#
#   $TETHER_TOOLS/kube-<version>/kube-apiserver
#   $TETHER_TOOLS/etcd-<version>/etcd
#
# TETHER_TOOLS defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/tether (the Makefile
# exports the same). Each binary is rebuilt only when missing, so bumping a
# pinned version below rebuilds that one binary and a fresh clone reuses the
# cache. Builds happen in scratch modules under a temp dir (the repository's
# go.mod is never read or touched) and are installed with an atomic rename, so
# an interrupted build never leaves a broken binary behind.
#
# A cold kube-apiserver build takes 4–6 minutes and ~2.4 GB of memory on two
# cores; etcd about one minute.
set -euo pipefail

# Pinned versions. KUBE_STAGING is the matching release of the staging modules
# (k8s.io/api, k8s.io/client-go, …), published as v0.<minor>.<patch>.
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
KUBE_STAGING=${KUBE_STAGING:-v0.${KUBE_VERSION#v1.}}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}

tools=${TETHER_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/tether}
apiserver=$tools/kube-$KUBE_VERSION/kube-apiserver
etcd=$tools/etcd-$ETCD_VERSION/etcd

export GOFLAGS=-mod=mod GO111MODULE=on GOWORK=off
ldflags="-s -w"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# quiet CMD…: run CMD, showing its output only if it fails (go get lists
# every module it adds).
quiet() {
  local out
  if ! out=$("$@" 2>&1); then
    printf '%s\n' "$out" >&2
    return 1
  fi
}

# install SRC DST: copy next to DST, then rename over it (atomic on one filesystem).
install_bin() {
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.tmp.$$"
  chmod 0755 "$2.tmp.$$"
  mv -f "$2.tmp.$$" "$2"
}

build_etcd() {
  local mod=$work/etcd
  mkdir -p "$mod"
  echo "building etcd $ETCD_VERSION from the Go module proxy (first time only; cached at $etcd)" >&2
  cat >"$mod/main.go" <<'EOF'
// Command etcd is the upstream etcd server, built from its Go module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  (
    cd "$mod"
    go mod init tether.local/buildetcd >/dev/null 2>&1
    quiet go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    go build -trimpath -ldflags "$ldflags" -o "$mod/etcd" .
  )
  install_bin "$mod/etcd" "$etcd"
  "$etcd" --version | head -1 >&2
}

build_apiserver() {
  local mod=$work/kube
  mkdir -p "$mod"
  echo "building kube-apiserver $KUBE_VERSION (staging $KUBE_STAGING) from the Go module proxy (first time only; cached at $apiserver)" >&2
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
  # with ./staging/src/k8s.io/<name>; a consumer must replace each one with the
  # published release instead. The list comes from that version's own go.mod,
  # so it follows the pinned version.
  local gomod
  gomod=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [[ -f "$gomod" ]] || { echo "error: could not fetch the go.mod of k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
  local staging
  staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod")
  [[ -n "$staging" ]] || { echo "error: no staging replace block in k8s.io/kubernetes@$KUBE_VERSION go.mod" >&2; exit 1; }
  # Stamp the version as the release build does (hack/lib/version.sh):
  # clients and charts read it (kubeVersion constraints, discovery), and an
  # unstamped build reports v0.0.0-master.
  local minor=${KUBE_VERSION#v1.}
  minor=${minor%%.*}
  local kldflags="$ldflags"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    kldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (
    cd "$mod"
    go mod init tether.local/buildkube >/dev/null 2>&1
    local args=()
    for m in $staging; do args+=("-replace=$m=$m@$KUBE_STAGING"); done
    go mod edit "${args[@]}"
    go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
    # A file importing the command keeps `go get`/`go build` honest about the
    # whole build graph of kube-apiserver.
    cat >tools.go <<'EOF'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
EOF
    quiet go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION"
    go build -trimpath -ldflags "$kldflags" -o "$mod/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  )
  install_bin "$mod/kube-apiserver" "$apiserver"
  "$apiserver" --version >&2
}

# A cached binary is reused only if it reports the pinned version, so an
# old or half-stamped build is replaced rather than trusted.
# (Output captured first: grep -q closing the pipe early would fail it.)
have() {
  local out
  [[ -x "$1" ]] && out=$("$1" --version 2>/dev/null) && grep -q "$2" <<<"$out"
}

start=$SECONDS
have "$etcd" "etcd Version: ${ETCD_VERSION#v}\$" || build_etcd
have "$apiserver" "^Kubernetes $KUBE_VERSION\$" || build_apiserver
if (( SECONDS - start > 1 )); then
  echo "control plane tools ready in $((SECONDS - start))s under $tools" >&2
fi
