#!/usr/bin/env bash
# build-helm.sh VERSION OUTPUT — builds helm VERSION from the Go module proxy
# (never a downloaded binary) and installs it at OUTPUT. Idempotent: when
# OUTPUT already exists and reports VERSION, nothing is rebuilt. The Makefile
# keys OUTPUT by version under the user's cache directory, so a fresh clone
# and the next session reuse the binary.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 VERSION OUTPUT   (for example: $0 v3.22.0 ~/.cache/tether/helm-v3.22.0/helm)" >&2
  exit 2
fi
version=$1
output=$2

if [[ -x "$output" ]] && "$output" version --template '{{.Version}}' 2>/dev/null | grep -qx "$version"; then
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$output")"

echo "building helm $version from the Go module proxy (first time only; cached at $output)" >&2
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
# The simplest path: go install with a version, in module-aware mode outside
# any module (so the caller's go.mod is neither read nor touched).
if ! (cd "$work" && GOBIN="$work/bin" GOFLAGS=-mod=mod GO111MODULE=on \
      go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$version"); then
  # Fallback for module versions whose go.mod has replace directives, which
  # go install pkg@version refuses: build inside a scratch module.
  echo "go install failed; building in a scratch module" >&2
  mkdir -p "$work/mod" "$work/bin"
  (cd "$work/mod" && go mod init tether.local/buildhelm >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go get "helm.sh/helm/v3@$version" &&
    GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$work/bin/helm" helm.sh/helm/v3/cmd/helm)
fi

# Install atomically so a concurrent or interrupted run never leaves half a binary.
cp "$work/bin/helm" "$output.tmp.$$"
chmod 0755 "$output.tmp.$$"
mv -f "$output.tmp.$$" "$output"
"$output" version --short >&2
