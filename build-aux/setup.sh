#!/bin/sh
# build-aux/setup.sh -- install what is missing, build moeflow, then run the demo or the tests.
#   sh build-aux/setup.sh demo    the end-to-end demo on bundled synthetic data
#   sh build-aux/setup.sh check   the whole test suite (what CI runs): a normal build and an
#                                 ASan+UBSan build, each running `make check`, then every
#                                 libFuzzer target for MOE_FUZZ_SECONDS (5) seconds
# Builds go to _build/ (and _build-san/), out of the source tree.
set -eu
cd "$(dirname "$0")/.."
top=$PWD
what=${1:-demo}
case $what in demo|check|build) ;; *) echo "usage: $0 demo|check|build" >&2; exit 2 ;; esac

# Debian packages the build needs (tools, required and optional libraries).
pkgs="build-essential autoconf automake libtool pkg-config zlib1g-dev liblpsolve55-dev
libdeflate-dev libpng-dev libopenmpi-dev openmpi-bin libopenblas-dev gzip time clang"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "setup: installing:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing
    else
        echo "setup: missing Debian packages; run:" >&2
        echo "  sudo apt-get install$missing" >&2
        exit 1
    fi
fi
if [ -f config.status ]; then
    echo "setup: the source tree is configured in place; run 'make distclean' first" >&2
    exit 1
fi
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt configure ]; then
    autoreconf -fi
fi
jobs=$(nproc 2>/dev/null || echo 2)

# build DIR [configure options...]: configure once (again when configure changes), make.
build() {
    dir=$1
    shift
    mkdir -p "$dir"
    if [ ! -f "$dir/Makefile" ] || [ configure -nt "$dir/config.status" ]; then
        (cd "$dir" && "$top/configure" --enable-werror "$@")
    fi
    make -C "$dir" -j"$jobs"
}

# check DIR: make check there, show failures, print one closing line; returns make's status.
check() {
    crc=0 # not rc: the caller's status of every step lives there
    make -C "$1" -j"$jobs" check || crc=$?
    [ "$crc" -eq 0 ] || tail -n 200 "$1/test-suite.log" 2>/dev/null || true
    awk -v d="$1" '/^# (PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):/ {n[$2]=$3}
         END {printf "%s: %d passed, %d failed, %d skipped\n", d, n["PASS:"]+n["XFAIL:"],
              n["FAIL:"]+n["XPASS:"]+n["ERROR:"], n["SKIP:"]}' "$1/test-suite.log"
    return "$crc"
}

build _build
case $what in
demo) sh build-aux/demo.sh "$top/_build/cmd" ;;
check)
    rc=0
    check _build || rc=1
    # nvcc's objects carry no sanitizer: the CUDA part is built and tested in _build only
    build _build-san --enable-asan --enable-ubsan --without-cuda
    ASAN_OPTIONS=detect_leaks=1 check _build-san || rc=1
    make -C _build fuzz && sh tests/fuzz/run.sh _build "${MOE_FUZZ_SECONDS:-5}" || rc=1
    [ "$rc" -eq 0 ] && echo "setup: all tests passed (normal and ASan+UBSan builds, fuzzing)"
    exit "$rc" ;;
build) ;;
esac
