#!/usr/bin/env bash
# Builds and runs Flotilla's libFuzzer targets (docs/fuzzing.md).
#   tests/fuzz/run.sh build                      configure and build them with clang
#   tests/fuzz/run.sh TARGET SECONDS [OPTION...]  fuzz TARGET (frame, json) for SECONDS,
#                                                 with more libFuzzer options if given
#   tests/fuzz/run.sh coverage TARGET DIR...      line coverage of Flotilla's files when
#                                                 TARGET runs the inputs in DIR (needs llvm-14)
# The build goes to $FUZZ_BUILD_DIR (default build/fuzz). A run starts from a copy of
# tests/fuzz/corpus/TARGET in a temporary folder, so the tree is never written; set
# FUZZ_CORPUS_OUT=DIR to keep the grown corpus. A crash, a leak, a timeout or any sanitizer
# report fails the run; the input that caused it is saved under
# $FUZZ_BUILD_DIR/artifacts/TARGET/ and its path printed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${FUZZ_BUILD_DIR:-$here/../../build/fuzz}"

usage() {
    sed -n '2,12p' "$0" >&2
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
# Runs each input once in a build with source-based coverage and prints llvm-cov's report.
coverage_report() {
    local target="$1"
    shift
    local dir="$build-coverage"
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        CXX=clang++ cmake -S "$here" -B "$dir" -G Ninja -DFLOTILLA_FUZZ_COVERAGE=ON >/dev/null
    fi
    cmake --build "$dir" --target "fuzz_$target" -- -j2 >/dev/null
    rm -f "$dir"/*.profraw
    LLVM_PROFILE_FILE="$dir/$target-%p.profraw" "$dir/fuzz_$target" -runs=0 "$@" >/dev/null 2>&1
    llvm-profdata-14 merge -sparse "$dir"/*.profraw -o "$dir/$target.profdata"
    llvm-cov-14 report "$dir/fuzz_$target" -instr-profile="$dir/$target.profdata" \
        $(cd "$here/../.." && for f in common/Sha256.cpp net/Protocol.cpp net/Frame.cpp net/TrustStore.cpp net/Pki.cpp \
                                       job/JobSpec.cpp job/Tasks.cpp job/PriceTable.cpp; do echo "$PWD/$f"; done)
}

[ $# -ge 2 ] || usage
if [ "$1" = coverage ]; then
    shift
    coverage_report "$@"
    exit 0
fi
target="$1"
seconds="$2"
shift 2
case "$target" in
    frame | json) ;;
    *) echo "unknown fuzz target '$target' (frame, json)" >&2; exit 2 ;;
esac
binary="$build/fuzz_$target"
[ -x "$binary" ] || build_targets

# The json target writes each input to a file: in memory where there is a tmpfs.
tmp="${TMPDIR:-/tmp}"
[ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm
export TMPDIR="$tmp"
work="$(mktemp -d "$tmp/flotilla-fuzz-$target.XXXXXX")"
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
