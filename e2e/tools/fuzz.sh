#!/usr/bin/env bash
# make fuzz: run each Fuzz function for FUZZTIME, and fail only on a failing
# input.
#
# Why not fail on any non-zero exit: with a duration -fuzztime, Go's fuzzing
# coordinator up to Go 1.26 can report "context deadline exceeded" as the
# time runs out, with no failing input (a race between the deadline and the
# workers' stop, go.dev/issue/75804, fixed in Go 1.27). A real failure
# writes its input to testdata/fuzz/<Name>/ in the package, so that is what
# decides: a target that exits non-zero without a new file there is run
# once more, and only counted as failed if it fails again.
#
# usage: fuzz.sh FUZZTIME Name:./package...
set -uo pipefail
fuzztime=${1:?usage: fuzz.sh FUZZTIME Name:./package...}
shift
go=${GO:-go}

# inputs DIR: the number of files in DIR (0 when it does not exist).
inputs() { find "$1" -type f 2>/dev/null | wc -l; }

failed=()
for t in "$@"; do
  name=${t%%:*} pkg=${t#*:}
  dir=$pkg/testdata/fuzz/$name
  for try in 1 2; do
    echo "fuzz $name ($pkg) for $fuzztime"
    before=$(inputs "$dir")
    "$go" test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg" && continue 2
    if (($(inputs "$dir") > before)); then
      echo "fuzz $name: FAILED, its failing input is in $dir" >&2
      failed+=("$name ($pkg)")
      continue 2
    fi
    echo "fuzz $name: exited non-zero with no failing input written (Go's fuzztime deadline race, go.dev/issue/75804); try $try of 2" >&2
  done
  failed+=("$name ($pkg): failed twice without a failing input")
done
if ((${#failed[@]} > 0)); then
  printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "fuzz: $# targets, none failed"
