#!/usr/bin/env bash
# The packages, tested as a user gets them: build the .deb and the .rpm with CPack, check
# their contents and dependencies, install the .deb (for real when run as root, else into a
# scratch root), run the installed flotilla --version and a one-epoch job, remove it and check
# that nothing is left behind.
#
#   tests/package.sh BUILD_DIR
set -euo pipefail

build=$(cd "${1:?give the build directory}" && pwd)
work=$(mktemp -d /tmp/flotilla-package.XXXXXX)
installed=no
cleanup() {
    if [[ $installed == yes ]]; then dpkg -r flotilla >/dev/null 2>&1 || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }
require_line() { # require_line FILE PATTERN WHAT
    grep -Eq -- "$2" "$1" || { cat "$1" >&2; fail "$3"; }
}

step "cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$work/deb" >"$work/cpack-deb.log" 2>&1) || { cat "$work/cpack-deb.log"; fail "cpack -G DEB"; }
deb=$(ls "$work"/deb/flotilla_*.deb)
echo "$deb ($(du -h "$deb" | cut -f1))"

step "contents and dependencies of the .deb"
dpkg-deb --contents "$deb" | awk '{print $NF}' >"$work/deb-files"
for f in ./usr/bin/flotilla \
         ./usr/share/applications/org.flotilla.Flotilla.desktop \
         ./usr/share/metainfo/org.flotilla.Flotilla.metainfo.xml \
         ./usr/share/icons/hicolor/scalable/apps/flotilla.svg \
         ./usr/share/icons/hicolor/48x48/apps/flotilla.png \
         ./usr/share/icons/hicolor/256x256/apps/flotilla.png \
         ./usr/share/man/man1/flotilla.1.gz \
         ./usr/share/doc/flotilla/LICENSE \
         ./usr/share/doc/flotilla/README.md \
         ./usr/share/doc/flotilla/docs/protocol.md \
         ./usr/lib/systemd/system/flotilla-worker@.service; do
    grep -qxF -- "$f" "$work/deb-files" || fail "the .deb lacks $f"
done
dpkg-deb --field "$deb" Depends | tr ',' '\n' | sed 's/^ *//' >"$work/deb-depends"
echo "Depends: $(paste -sd, "$work/deb-depends")"
# dpkg-shlibdeps found the libraries the binary links: LibTorch, Qt 6, OpenSSL 3, SQLite, zlib.
require_line "$work/deb-depends" '^libtorch1\.13' "the .deb does not depend on LibTorch"
require_line "$work/deb-depends" '^libqt6core6' "the .deb does not depend on Qt 6 Core"
require_line "$work/deb-depends" '^libqt6charts6' "the .deb does not depend on Qt 6 Charts"
require_line "$work/deb-depends" '^libssl3' "the .deb does not depend on OpenSSL 3"
require_line "$work/deb-depends" '^libsqlite3-0' "the .deb does not depend on SQLite"
require_line "$work/deb-depends" '^zlib1g' "the .deb does not depend on zlib"
dpkg-deb --field "$deb" Recommends | grep -q dataset-fashion-mnist || fail "the .deb does not recommend the data set"

step "the man page"
zcat "$build/packaging/flotilla.1.gz" >"$work/flotilla.1"
for section in '^\.SH SYNOPSIS' '^\.SH COMMANDS' '^\.SS flotilla train' '^\.SS flotilla worker' '--preemption-watch'; do
    require_line "$work/flotilla.1" "$section" "the man page lacks $section"
done
if command -v man >/dev/null; then
    MANWIDTH=80 man -l "$work/flotilla.1" >"$work/man.txt" 2>"$work/man.err" || fail "man cannot render flotilla(1)"
    [[ ! -s $work/man.err ]] || { cat "$work/man.err"; fail "man warns about flotilla(1)"; }
fi

step "desktop entry and AppStream metadata"
if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate "$(dirname "$0")/../packaging/linux/org.flotilla.Flotilla.desktop" || fail "desktop-file-validate"
fi
if command -v appstreamcli >/dev/null; then
    appstreamcli validate --no-net --pedantic "$(dirname "$0")/../packaging/linux/org.flotilla.Flotilla.metainfo.xml" \
        || fail "appstreamcli validate"
fi

step "install the .deb"
if [[ $(id -u) == 0 ]] && ! dpkg -s flotilla >/dev/null 2>&1; then
    dpkg -i "$deb" >"$work/dpkg-i.log" 2>&1 || { cat "$work/dpkg-i.log"; fail "dpkg -i"; }
    installed=yes
    root=
    echo "installed for real"
else
    # Not root, or a flotilla package is installed already (don't touch it): a scratch root.
    dpkg-deb -x "$deb" "$work/root"
    root=$work/root
    echo "unpacked into $root"
fi
flotilla=$root/usr/bin/flotilla
[[ -x $flotilla ]] || fail "$flotilla is not an executable"
version=$("$flotilla" --version)
echo "$version"
[[ $version =~ ^flotilla\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "unexpected --version output: $version"
[[ $version == "flotilla $(dpkg-deb --field "$deb" Version)" ]] || fail "--version does not match the package version"

step "a one-epoch job from the installed binary"
"$flotilla" train --model mlp --epochs 1 --shards 4 --workers 2 --train-limit 2000 --test-limit 500 \
    --preempt-mean 0 --run-dir "$work/run" </dev/null >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "the smoke job failed"; }
tail -n 3 "$work/train.log"
[[ -s $work/run/model.pt && -s $work/run/metrics.csv && -s $work/run/flotilla.db ]] || fail "the smoke job left no model, metrics or store"

if [[ $installed == yes ]]; then
    step "systemd-analyze verify on the installed worker unit"
    if command -v systemd-analyze >/dev/null; then
        mkdir -p "$work/units"
        cp /usr/lib/systemd/system/flotilla-worker@.service "$work/units/flotilla-worker@lab.service"
        # The token file is the admin's to create; verify reads the unit, not the credential.
        SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$work/units/flotilla-worker@lab.service" \
            >"$work/verify.log" 2>&1 || true
        # Complaints about this unit (not about the host's other units) fail the test.
        if grep -i "flotilla-worker" "$work/verify.log" | grep -vi "Failed to load credential\|Cannot add dependency job" >"$work/verify-own.log"; then
            if [[ -s $work/verify-own.log ]]; then cat "$work/verify-own.log"; fail "systemd-analyze verify"; fi
        fi
        echo "systemd-analyze verify: no complaints about the unit"
    fi

    step "remove the .deb"
    dpkg -r flotilla >"$work/dpkg-r.log" 2>&1 || { cat "$work/dpkg-r.log"; fail "dpkg -r"; }
    installed=no
    [[ ! -e /usr/bin/flotilla ]] || fail "/usr/bin/flotilla is left after removal"
    while read -r f; do
        path=${f#.}
        [[ -z $path || -d $path ]] && continue
        [[ ! -e $path ]] || fail "$path is left after removal"
    done <"$work/deb-files"
    dpkg -s flotilla >/dev/null 2>&1 && fail "dpkg still lists flotilla after removal"
    echo "removed; nothing left behind"
fi

step "cpack -G RPM"
(cd "$build" && cpack -G RPM -B "$work/rpm" >"$work/cpack-rpm.log" 2>&1) || { cat "$work/cpack-rpm.log"; fail "cpack -G RPM"; }
rpm=$(ls "$work"/rpm/flotilla-*.rpm)
echo "$rpm ($(du -h "$rpm" | cut -f1))"
rpm -qpl "$rpm" 2>/dev/null >"$work/rpm-files"
for f in /usr/bin/flotilla /usr/share/applications/org.flotilla.Flotilla.desktop \
         /usr/share/metainfo/org.flotilla.Flotilla.metainfo.xml /usr/share/icons/hicolor/scalable/apps/flotilla.svg \
         /usr/share/man/man1/flotilla.1.gz /usr/share/doc/flotilla/LICENSE /usr/lib/systemd/system/flotilla-worker@.service; do
    grep -qxF -- "$f" "$work/rpm-files" || { cat "$work/rpm-files"; fail "the .rpm lacks $f"; }
done
# The package must not claim directories other packages own.
for d in /usr /usr/bin /usr/share /usr/share/applications /usr/share/icons /usr/share/man /usr/share/man/man1 /usr/share/doc /usr/lib /usr/lib/systemd; do
    grep -qxF -- "$d" "$work/rpm-files" && fail "the .rpm claims the system directory $d"
done
rpm -qpR "$rpm" 2>/dev/null >"$work/rpm-requires"
echo "Requires: $(grep -c . "$work/rpm-requires") entries"
require_line "$work/rpm-requires" '^libtorch(_cpu)?\.so' "the .rpm does not require LibTorch"
require_line "$work/rpm-requires" '^libQt6Core\.so\.6' "the .rpm does not require Qt 6 Core"
require_line "$work/rpm-requires" '^libcrypto\.so\.3' "the .rpm does not require OpenSSL 3 (libcrypto)"
require_line "$work/rpm-requires" '^libsqlite3\.so' "the .rpm does not require SQLite"

echo "PASS: packages built, checked, installed, run and removed"
