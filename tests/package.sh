#!/usr/bin/env bash
# The packages, tested as a user gets them: build the .debs and the .rpms (flotilla-headless
# and flotilla) with CPack, check their contents and dependencies (the headless one links no
# widgets, charts or OpenGL), install the .debs (for real when run as root, else into a scratch
# root), run the installed binaries' --version and a one-epoch job, remove them and check that
# nothing is left behind.
#
#   tests/package.sh BUILD_DIR
set -euo pipefail

build=$(cd "${1:?give the build directory}" && pwd)
work=$(mktemp -d /tmp/flotilla-package.XXXXXX)
installed=no
cleanup() {
    if [[ $installed == yes ]]; then dpkg -r flotilla flotilla-headless >/dev/null 2>&1 || true; fi
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
hdeb=$(ls "$work"/deb/flotilla-headless_*.deb)
echo "$deb ($(du -h "$deb" | cut -f1))"
echo "$hdeb ($(du -h "$hdeb" | cut -f1))"

step "contents and dependencies of the .debs"
dpkg-deb --contents "$deb" | awk '{print $NF}' >"$work/deb-files"
dpkg-deb --contents "$hdeb" | awk '{print $NF}' >"$work/hdeb-files"
for f in ./usr/bin/flotilla \
         ./usr/share/applications/org.flotilla.Flotilla.desktop \
         ./usr/share/metainfo/org.flotilla.Flotilla.metainfo.xml \
         ./usr/share/icons/hicolor/scalable/apps/flotilla.svg \
         ./usr/share/icons/hicolor/48x48/apps/flotilla.png \
         ./usr/share/icons/hicolor/256x256/apps/flotilla.png \
         ./usr/share/man/man1/flotilla.1.gz \
         ./usr/share/doc/flotilla/LICENSE \
         ./usr/share/doc/flotilla/README.md; do
    grep -qxF -- "$f" "$work/deb-files" || fail "the flotilla .deb lacks $f"
done
for f in ./usr/bin/flotilla-headless \
         ./usr/share/man/man1/flotilla-headless.1.gz \
         ./usr/share/doc/flotilla-headless/LICENSE \
         ./usr/share/doc/flotilla-headless/docs/protocol.md \
         ./usr/lib/systemd/system/flotilla-worker@.service \
         ./usr/share/flotilla/systemd/gpu.conf; do
    grep -qxF -- "$f" "$work/hdeb-files" || fail "the flotilla-headless .deb lacks $f"
done
# No file in both: the two install side by side.
sort "$work/deb-files" "$work/hdeb-files" | grep -v '/$' | uniq -d >"$work/both"
[[ ! -s $work/both ]] || { cat "$work/both"; fail "the two .debs hold the same files"; }
grep -qxF ./usr/bin/flotilla "$work/hdeb-files" && fail "the flotilla-headless .deb holds the desktop's binary"
dpkg-deb --field "$deb" Depends | tr ',' '\n' | sed 's/^ *//' >"$work/deb-depends"
dpkg-deb --field "$hdeb" Depends | tr ',' '\n' | sed 's/^ *//' >"$work/hdeb-depends"
echo "flotilla Depends: $(paste -sd, "$work/deb-depends")"
echo "flotilla-headless Depends: $(paste -sd, "$work/hdeb-depends")"
# dpkg-shlibdeps found the libraries the binaries link: LibTorch, Qt 6, OpenSSL 3, SQLite, zlib.
require_line "$work/hdeb-depends" '^libtorch1\.13' "flotilla-headless does not depend on LibTorch"
require_line "$work/hdeb-depends" '^libqt6core6' "flotilla-headless does not depend on Qt 6 Core"
require_line "$work/hdeb-depends" '^libssl3' "flotilla-headless does not depend on OpenSSL 3"
require_line "$work/hdeb-depends" '^libsqlite3-0' "flotilla-headless does not depend on SQLite"
require_line "$work/hdeb-depends" '^zlib1g' "flotilla-headless does not depend on zlib"
# Headless: no widgets, charts or OpenGL, neither in its dependencies nor in what the binary links.
if grep -E '^libqt6(widgets|charts|opengl)' "$work/hdeb-depends"; then
    fail "flotilla-headless depends on a desktop library"
fi
dpkg-deb -x "$hdeb" "$work/hroot"
if ldd "$work/hroot/usr/bin/flotilla-headless" | grep -E 'libQt6(Widgets|Charts|OpenGL)'; then
    fail "flotilla-headless links a desktop library"
fi
require_line "$work/deb-depends" '^flotilla-headless \(= ' "flotilla does not depend on flotilla-headless of its version"
require_line "$work/deb-depends" '^libqt6charts6' "flotilla does not depend on Qt 6 Charts"
dpkg-deb --field "$hdeb" Recommends | grep -q dataset-fashion-mnist || fail "flotilla-headless does not recommend the data set"

step "the man pages"
for page in flotilla flotilla-headless; do
    zcat "$build/packaging/$page.1.gz" >"$work/$page.1"
    for section in '^\.SH SYNOPSIS' '^\.SH COMMANDS' "^\\.SS $page train" "^\\.SS $page worker" '--preemption-watch'; do
        require_line "$work/$page.1" "$section" "$page(1) lacks $section"
    done
    if command -v man >/dev/null; then
        MANWIDTH=80 man -l "$work/$page.1" >"$work/man.txt" 2>"$work/man.err" || fail "man cannot render $page(1)"
        [[ ! -s $work/man.err ]] || { cat "$work/man.err"; fail "man warns about $page(1)"; }
    fi
done
grep -q '^\.SS flotilla-headless simulate' "$work/flotilla-headless.1" && fail "flotilla-headless(1) lists simulate"

step "desktop entry and AppStream metadata"
if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate "$(dirname "$0")/../packaging/linux/org.flotilla.Flotilla.desktop" || fail "desktop-file-validate"
fi
if command -v appstreamcli >/dev/null; then
    appstreamcli validate --no-net --pedantic "$(dirname "$0")/../packaging/linux/org.flotilla.Flotilla.metainfo.xml" \
        || fail "appstreamcli validate"
fi

step "install the .debs"
if [[ $(id -u) == 0 ]] && ! dpkg -s flotilla >/dev/null 2>&1 && ! dpkg -s flotilla-headless >/dev/null 2>&1; then
    # The desktop's package alone is refused: it needs flotilla-headless.
    if dpkg -i "$deb" >"$work/dpkg-alone.log" 2>&1; then
        dpkg -r flotilla >/dev/null 2>&1 || true
        fail "flotilla installed without flotilla-headless"
    fi
    dpkg -r flotilla >/dev/null 2>&1 || true
    dpkg -i "$hdeb" "$deb" >"$work/dpkg-i.log" 2>&1 || { cat "$work/dpkg-i.log"; fail "dpkg -i"; }
    installed=yes
    root=
    echo "installed for real"
else
    # Not root, or a flotilla package is installed already (don't touch it): a scratch root.
    dpkg-deb -x "$deb" "$work/root"
    dpkg-deb -x "$hdeb" "$work/root"
    root=$work/root
    echo "unpacked into $root"
fi
for binary in flotilla flotilla-headless; do
    path=$root/usr/bin/$binary
    [[ -x $path ]] || fail "$path is not an executable"
    version=$("$path" --version)
    echo "$version"
    [[ $version =~ ^$binary\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "unexpected --version output: $version"
    [[ $version == "$binary $(dpkg-deb --field "$deb" Version)" ]] || fail "--version does not match the package version"
done

step "a one-epoch job from the installed flotilla-headless"
"$root/usr/bin/flotilla-headless" train --model mlp --epochs 1 --shards 4 --workers 2 --train-limit 2000 --test-limit 500 \
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

    step "remove the .debs"
    dpkg -r flotilla flotilla-headless >"$work/dpkg-r.log" 2>&1 || { cat "$work/dpkg-r.log"; fail "dpkg -r"; }
    installed=no
    [[ ! -e /usr/bin/flotilla && ! -e /usr/bin/flotilla-headless ]] || fail "a binary is left after removal"
    while read -r f; do
        path=${f#.}
        [[ -z $path || -d $path ]] && continue
        [[ ! -e $path ]] || fail "$path is left after removal"
    done < <(cat "$work/deb-files" "$work/hdeb-files")
    dpkg -s flotilla >/dev/null 2>&1 && fail "dpkg still lists flotilla after removal"
    dpkg -s flotilla-headless >/dev/null 2>&1 && fail "dpkg still lists flotilla-headless after removal"
    echo "removed; nothing left behind"
fi

step "cpack -G RPM"
(cd "$build" && cpack -G RPM -B "$work/rpm" >"$work/cpack-rpm.log" 2>&1) || { cat "$work/cpack-rpm.log"; fail "cpack -G RPM"; }
rpm=$(ls "$work"/rpm/flotilla-[0-9]*.rpm)
hrpm=$(ls "$work"/rpm/flotilla-headless-[0-9]*.rpm)
echo "$rpm ($(du -h "$rpm" | cut -f1))"
echo "$hrpm ($(du -h "$hrpm" | cut -f1))"
rpm -qpl "$rpm" 2>/dev/null >"$work/rpm-files"
rpm -qpl "$hrpm" 2>/dev/null >"$work/hrpm-files"
for f in /usr/bin/flotilla /usr/share/applications/org.flotilla.Flotilla.desktop \
         /usr/share/metainfo/org.flotilla.Flotilla.metainfo.xml /usr/share/icons/hicolor/scalable/apps/flotilla.svg \
         /usr/share/man/man1/flotilla.1.gz /usr/share/doc/flotilla/LICENSE; do
    grep -qxF -- "$f" "$work/rpm-files" || { cat "$work/rpm-files"; fail "the flotilla .rpm lacks $f"; }
done
for f in /usr/bin/flotilla-headless /usr/share/man/man1/flotilla-headless.1.gz /usr/share/doc/flotilla-headless/LICENSE \
         /usr/lib/systemd/system/flotilla-worker@.service; do
    grep -qxF -- "$f" "$work/hrpm-files" || { cat "$work/hrpm-files"; fail "the flotilla-headless .rpm lacks $f"; }
done
# The packages must not claim directories other packages own.
for d in /usr /usr/bin /usr/share /usr/share/applications /usr/share/icons /usr/share/man /usr/share/man/man1 /usr/share/doc /usr/lib /usr/lib/systemd; do
    grep -qxF -- "$d" "$work/rpm-files" "$work/hrpm-files" && fail "an .rpm claims the system directory $d"
done
rpm -qpR "$rpm" 2>/dev/null >"$work/rpm-requires"
rpm -qpR "$hrpm" 2>/dev/null >"$work/hrpm-requires"
echo "Requires: flotilla $(grep -c . "$work/rpm-requires"), flotilla-headless $(grep -c . "$work/hrpm-requires") entries"
require_line "$work/hrpm-requires" '^libtorch(_cpu)?\.so' "flotilla-headless.rpm does not require LibTorch"
require_line "$work/hrpm-requires" '^libQt6Core\.so\.6' "flotilla-headless.rpm does not require Qt 6 Core"
require_line "$work/hrpm-requires" '^libcrypto\.so\.3' "flotilla-headless.rpm does not require OpenSSL 3 (libcrypto)"
require_line "$work/hrpm-requires" '^libsqlite3\.so' "flotilla-headless.rpm does not require SQLite"
grep -E '^libQt6(Widgets|Charts|OpenGL)' "$work/hrpm-requires" && fail "flotilla-headless.rpm requires a desktop library"
require_line "$work/rpm-requires" '^flotilla-headless = ' "flotilla.rpm does not require flotilla-headless"

echo "PASS: packages built, checked, installed, run and removed"
