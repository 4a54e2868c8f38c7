#!/usr/bin/env bash
# e2e.sh — runs the end-to-end suite (go test -tags e2e ./e2e/...) against a
# real kube-apiserver + etcd from the tool cache (make kube-tools), with
# tether-sidecar and tether-injector from their images' unpacked
# filesystems (make images: bin/images/rootfs/<image>/) and modelsim from
# make build. `make e2e` calls it after both.
#
#   RUN=TestScenario3 bash e2e/tools/e2e.sh     # one scenario (a go test -run regexp)
#   E2E_FLAGS="-race" bash e2e/tools/e2e.sh     # extra go test flags
#
# It prints the suite's wall time at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."

tools=${TETHER_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/tether}
# The pinned versions live in build-kube.sh; read them from there so the two
# never disagree.
kube_version=$(sed -n 's/^KUBE_VERSION=\${KUBE_VERSION:-\(v[^}]*\)}$/\1/p' e2e/tools/build-kube.sh)
etcd_version=$(sed -n 's/^ETCD_VERSION=\${ETCD_VERSION:-\(v[^}]*\)}$/\1/p' e2e/tools/build-kube.sh)
export TETHER_TOOLS=$tools
export TETHER_KUBE_APISERVER=${TETHER_KUBE_APISERVER:-$tools/kube-${KUBE_VERSION:-$kube_version}/kube-apiserver}
export TETHER_ETCD=${TETHER_ETCD:-$tools/etcd-${ETCD_VERSION:-$etcd_version}/etcd}
export TETHER_BIN=${TETHER_BIN:-$PWD/bin}
export TETHER_ROOTFS=${TETHER_ROOTFS:-$PWD/bin/images/rootfs}
if [[ -n "${TETHER_HELM:-}" ]]; then export TETHER_HELM; fi

for b in "$TETHER_KUBE_APISERVER" "$TETHER_ETCD"; do
  [[ -x "$b" ]] || { echo "error: $b is missing: run make kube-tools" >&2; exit 1; }
done
[[ -x "$TETHER_BIN/modelsim" ]] || { echo "error: $TETHER_BIN/modelsim is missing: run make build" >&2; exit 1; }
for b in tether-sidecar tether-injector; do
  [[ -x "$TETHER_ROOTFS/$b/$b" ]] || { echo "error: $TETHER_ROOTFS/$b/$b is missing: run make images" >&2; exit 1; }
done

args=(-tags e2e -count=1 -v -timeout "${E2E_TIMEOUT:-30m}")
if [[ -n "${RUN:-}" ]]; then args+=(-run "$RUN"); fi
# shellcheck disable=SC2206 # E2E_FLAGS is a list of flags
if [[ -n "${E2E_FLAGS:-}" ]]; then args+=($E2E_FLAGS); fi

start=$(date +%s)
rc=0
# Only the packages with e2e-tagged tests: the others' unit tests already
# ran in make unit.
mapfile -t pkgs < <(grep -rl --include='*_test.go' '^//go:build e2e' e2e | xargs -n1 dirname | sort -u | sed 's|^|./|')
if [[ ${#pkgs[@]} -eq 0 ]]; then echo "error: no e2e tests found under e2e/" >&2; exit 1; fi
go test "${args[@]}" "${pkgs[@]}" || rc=$?
elapsed=$(( $(date +%s) - start ))
printf 'e2e suite wall time: %dm%02ds (exit %d)\n' $((elapsed / 60)) $((elapsed % 60)) "$rc"
exit "$rc"
