#!/usr/bin/env bash
# The layering is enforced by the include paths: each probe includes a folder its target
# does not link and must fail to compile for exactly that reason.
#   check.sh BUILD_DIR
set -uo pipefail
build="$1"
out=$(cmake --build "$build" --target layering_ui_engine layering_net_engine layering_job_ui -- -k 0 2>&1)
status=0
for expected in engine/Store.h engine/Model.h ui/SessionTypes.h; do
    if grep -Eq "${expected//./\\.}('| ?:).*(No such file|not found)" <<<"$out"; then
        echo "refused as it should be: $expected"
    else
        echo "NOT refused: $expected"
        status=1
    fi
done
if [ $status -ne 0 ]; then
    echo "--- build output ---"
    echo "$out"
fi
exit $status
