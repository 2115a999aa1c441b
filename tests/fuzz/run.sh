#!/usr/bin/env bash
# Builds and runs Flotilla's libFuzzer targets (docs/fuzzing.md).
#   tests/fuzz/run.sh build                      configure and build them with clang
#   tests/fuzz/run.sh TARGET SECONDS [OPTION...]  fuzz TARGET (frame, json) for SECONDS,
#                                                 with more libFuzzer options if given
# The build goes to $FUZZ_BUILD_DIR (default build/fuzz). A run starts from a copy of
# tests/fuzz/corpus/TARGET in a temporary folder, so the tree is never written; set
# FUZZ_CORPUS_OUT=DIR to keep the grown corpus. A crash, a leak, a timeout or any sanitizer
# report fails the run; the input that caused it is saved under
# $FUZZ_BUILD_DIR/artifacts/TARGET/ and its path printed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${FUZZ_BUILD_DIR:-$here/../../build/fuzz}"

usage() {
    sed -n '2,10p' "$0" >&2
    exit 2
}

build_targets() {
    if ! command -v clang++ >/dev/null; then
        echo "clang++ is missing: install clang and libclang-rt-14-dev (scripts/setup.sh does)" >&2
        exit 1
    fi
    if [ ! -f "$build/CMakeCache.txt" ]; then
        launcher=()
        command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
        CXX=clang++ cmake -S "$here" -B "$build" -G Ninja "${launcher[@]}" >/dev/null
    fi
    cmake --build "$build" -- -j2
}

[ $# -ge 1 ] || usage
if [ "$1" = build ]; then
    build_targets
    exit 0
fi
[ $# -ge 2 ] || usage
target="$1"
seconds="$2"
shift 2
case "$target" in
    frame | json) ;;
    *) echo "unknown fuzz target '$target' (frame, json)" >&2; exit 2 ;;
esac
binary="$build/fuzz_$target"
[ -x "$binary" ] || build_targets

work="$(mktemp -d "${TMPDIR:-/tmp}/flotilla-fuzz-$target.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
cp "$here/corpus/$target/"* "$work/corpus/"
artifacts="$build/artifacts/$target"
mkdir -p "$artifacts"

# -timeout: an input that takes 20 s is a hang. Leaks are checked (ASan's LeakSanitizer).
set +e
"$binary" "$work/corpus" -max_total_time="$seconds" -max_len=16384 -timeout=20 -rss_limit_mb=2048 \
    -dict="$here/$target.dict" -artifact_prefix="$artifacts/" -print_final_stats=1 "$@" 2>&1 | tee "$work/log"
status=${PIPESTATUS[0]}
set -e

files=$(find "$work/corpus" -type f | wc -l)
bytes=$(du -sb "$work/corpus" | cut -f1)
echo "fuzz_$target: corpus $files files, $bytes bytes"
if [ -n "${FUZZ_CORPUS_OUT:-}" ]; then
    mkdir -p "$FUZZ_CORPUS_OUT"
    cp "$work/corpus/"* "$FUZZ_CORPUS_OUT/"
fi
if [ "$status" -ne 0 ] || grep -qE "runtime error:|ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|ERROR: libFuzzer" "$work/log"; then
    echo "fuzz_$target FAILED (exit status $status); the input is in $artifacts/" >&2
    exit 1
fi
echo "fuzz_$target: no crash, leak, timeout or sanitizer report in ${seconds} s"
