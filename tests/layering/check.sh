#!/usr/bin/env bash
# The layering is enforced by the include paths: each probe (<from>_includes_<to>.cpp) ends
# with an include of a folder its target does not link and must fail to compile for exactly
# that reason: its own build output must name that header as not found.
#   check.sh BUILD_DIR
set -uo pipefail
build="$1"
here="$(cd "$(dirname "$0")" && pwd)"
status=0
for probe in "$here"/*_includes_*.cpp; do
    name=$(basename "$probe" .cpp)
    expected=$(sed -n 's/^#include "\(.*\)"$/\1/p' "$probe" | tail -1)
    out=$(cmake --build "$build" --target "layering_${name/_includes_/_}" 2>&1)
    if grep -Eq "${expected//./\\.}('| ?:).*(No such file|not found)" <<<"$out"; then
        echo "refused as it should be: $name: $expected"
    else
        echo "NOT refused: $name: $expected"
        echo "--- build output ---"
        echo "$out"
        status=1
    fi
done
exit $status
