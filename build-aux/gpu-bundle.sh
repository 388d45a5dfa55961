#!/bin/sh
# build-aux/gpu-bundle.sh -- make, on the build machine, a self-contained folder that builds and
# checks moeflow on a bare GPU machine (CUDA, NCCL, gcc, python3 with torch; no Open MPI, zlib or
# lp_solve development files, no autotools, no network): the `make dist` tarball, the Debian
# packages the build and the MPI runs need (apt-get download; unpacked there with dpkg -x into a
# prefix, no root needed) and run.sh (build-aux/gpu-run.sh), which writes one report.
# How to run it on a lent GPU machine: doc/gpu-bundle.
#
# usage: gpu-bundle.sh [--builddir DIR] [--tarball FILE] [--no-debs] [--deb-cache DIR]
#                      [--check-chroot[=DIR]] [OUTDIR]
set -eu

me=gpu-bundle.sh
here=$(cd "$(dirname "$0")" && pwd)
usage() {
    cat <<EOF
Usage: sh build-aux/gpu-bundle.sh [OPTION]... [OUTDIR]
Make OUTDIR [gpu-bundle] holding moeflow's dist tarball, the Debian packages its build and MPI
runs need on a bare GPU machine, and run.sh, which builds there and checks every GPU step.

      --builddir=DIR   configured build tree whose 'make dist' makes the tarball [.]
      --tarball=FILE   use this dist tarball instead of running 'make dist'
      --no-debs        bundle no packages (the GPU machine must have them installed)
      --deb-cache=DIR  reuse the .deb files found in DIR, and keep new downloads there
      --check-chroot[=DIR]  then run the bundle, as far as it goes without a GPU, in a Debian
                       12 chroot at DIR [\${TMPDIR:-/var/tmp}/moeflow-bookworm] with no ssh,
                       MPI, zlib or lp_solve development files (made by debootstrap when
                       missing; root needed): exit 0 when run.sh reaches its first GPU step
      --help           display this help and exit

The packages are those installed on this machine (apt-get download fetches the same
versions); library dependencies are followed through the ELF files' needed libraries, leaving
out the packages every Debian or Ubuntu base has (Priority required or important).
Exit status: 0 ok, 1 failure, 2 usage.
EOF
}
die() {
    echo "$me: $*" >&2
    exit 1
}

out=gpu-bundle builddir=. tarball='' debs=yes cache='' chroot=''
while [ $# -gt 0 ]; do
    case $1 in
    --check-chroot) chroot=${TMPDIR:-/var/tmp}/moeflow-bookworm ;;
    --check-chroot=*) chroot=${1#*=} ;;
    --builddir=*) builddir=${1#*=} ;;
    --tarball=*) tarball=${1#*=} ;;
    --deb-cache=*) cache=${1#*=} ;;
    --builddir | --tarball | --deb-cache)
        [ $# -ge 2 ] || { echo "$me: option '$1' needs a value" >&2; exit 2; }
        case $1 in
        --builddir) builddir=$2 ;;
        --tarball) tarball=$2 ;;
        --deb-cache) cache=$2 ;;
        esac
        shift
        ;;
    --no-debs) debs=no ;;
    --help) usage; exit 0 ;;
    -*)
        echo "$me: unknown option '$1'" >&2
        echo "Try '$me --help' for more information." >&2
        exit 2
        ;;
    *) out=$1 ;;
    esac
    shift
done

# The packages the build and the runs need, besides what the GPU machine has: Open MPI (library,
# headers and wrapper compilers, mpirun and orted, help files), zlib and lp_solve development
# files (lp_solve links -lcolamd, whose .so link is in libsuitesparse-dev), libdeflate, and make
# (used only where the machine has none).
SEEDS="libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common zlib1g-dev liblpsolve55-dev
libsuitesparse-dev libcolamd2 libdeflate-dev libdeflate0 make"

# ----------------------------------------------------------------- the tarball
if [ -z "$tarball" ]; then
    [ -f "$builddir/Makefile" ] || die "no Makefile in '$builddir': run from a configured build" \
        "tree, or give --builddir or --tarball"
    echo "$me: make dist in $builddir" >&2
    (cd "$builddir" && make -s dist >/dev/null) || die "make dist failed in '$builddir'"
    tarball=$(ls -t "$builddir"/moeflow-*.tar.gz 2>/dev/null | head -1)
    [ -n "$tarball" ] || die "make dist left no moeflow-*.tar.gz in '$builddir'"
fi
[ -f "$tarball" ] || die "cannot open '$tarball': No such file or directory"

rm -rf "$out"
mkdir -p "$out/debs"
cp "$tarball" "$out/"
cp "$here/gpu-run.sh" "$out/run.sh"
chmod +x "$out/run.sh"

# ----------------------------------------------------------------- the packages
# is_base PKG: PKG is on every Debian/Ubuntu base system (or is the C/C++ runtime that the GPU
# machine's own compilers and python need at their own, newer version).
is_base() {
    case $1 in libc6 | libgcc-s1 | libstdc++6 | zlib1g) return 0 ;; esac
    _prio=$(dpkg-query -W -f '${Priority}' "$1" 2>/dev/null)
    case $_prio in required | important) return 0 ;; esac
    return 1
}

# owners FILE: "SONAME PACKAGE" for each SONAME listed in FILE that an installed package of
# this machine holds (x86-64); one dpkg -S for all (it reads every package's file list).
owners() {
    ldconfig -p | awk 'NR == FNR { want[$1] = 1; next }
        ($1 in want) && /x86-64/ && !seen[$1]++ { print $1, $NF }' "$1" - >"$tmp/paths"
    while read -r _so _p; do
        _r=$(readlink -f "$_p")
        for _f in "$_p" "$_r" "/usr$_p" "${_p#/usr}" "/usr$_r" "${_r#/usr}"; do
            echo "$_so $_f"
        done
    done <"$tmp/paths" | sort -u >"$tmp/cands"
    [ -s "$tmp/cands" ] || return 0
    # shellcheck disable=SC2046
    dpkg -S $(cut -d' ' -f2 "$tmp/cands") 2>/dev/null | sed -n 's/^\([^:,]*\)[^ ]* \(.*\)/\2 \1/p' |
        sort -u >"$tmp/owned"
    awk 'NR == FNR { pk[$1] = $2; next } ($2 in pk) && !seen[$1]++ { print $1, pk[$2] }' \
        "$tmp/owned" "$tmp/cands"
}

# fetch PKG...: the installed version's .deb of each into $out/debs (from the cache if there).
fetch() {
    for _pk in "$@"; do
        _v=$(dpkg-query -W -f '${Version}' "$_pk" 2>/dev/null) ||
            die "package $_pk is not installed here (build-aux/setup.sh installs the build's)"
        _fv=$(echo "$_v" | sed 's/:/%3a/')
        _hit=
        [ -n "$cache" ] && _hit=$(ls "$cache/${_pk}_${_fv}_"*.deb 2>/dev/null | head -1)
        if [ -n "$_hit" ]; then
            cp "$_hit" "$out/debs/"
        else
            (cd "$out/debs" && apt-get -q -o APT::Sandbox::User=root download "$_pk=$_v" \
                >/dev/null 2>&1) || die "apt-get download $_pk=$_v failed (no registry?)"
            [ -z "$cache" ] || { mkdir -p "$cache" && cp "$out/debs/${_pk}_"*.deb "$cache/"; }
        fi
    done
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ "$debs" = yes ]; then
    for t in apt-get dpkg dpkg-query ldconfig readelf; do
        command -v $t >/dev/null || die "$t not found (a Debian or Ubuntu build machine is needed)"
    done
    # shellcheck disable=SC2086,SC2116
    have=" " todo=$(echo $SEEDS) unresolved=
    : >"$tmp/seen"
    # Fixed point: unpack what is new, then every needed library that no unpacked file provides
    # names its package on this machine; a package of the base is left to the GPU machine.
    while [ -n "$todo" ]; do
        # shellcheck disable=SC2086
        fetch $todo
        for p in $todo; do
            have="$have$p "
            dpkg -x "$out/debs/${p}_"*.deb "$tmp/root"
        done
        find "$tmp/root" \( -name '*.so*' -o -path '*/bin/*' \) \( -type f -o -type l \) \
            -exec basename {} \; | sort -u >"$tmp/provided"
        find "$tmp/root" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec readelf -d {} + \
            2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u >"$tmp/needed"
        todo=
        # each library is looked up once (dpkg -S is slow)
        comm -23 "$tmp/needed" "$tmp/provided" | sort - "$tmp/seen" "$tmp/seen" | uniq -u \
            >"$tmp/new"
        cat "$tmp/new" >>"$tmp/seen"
        owners "$tmp/new" >"$tmp/own"
        for so in $(cat "$tmp/new"); do
            pk=$(awk -v s="$so" '$1 == s { print $2 }' "$tmp/own")
            if [ -z "$pk" ]; then
                unresolved="$unresolved $so"
                continue
            fi
            case "$have$todo " in *" $pk "*) continue ;; esac
            is_base "$pk" || todo="$todo $pk"
        done
        todo=${todo# }
    done
    # The newest glibc symbol version any bundled program or library needs: run.sh compares it
    # with the GPU machine's glibc (packages of a newer distribution than the machine fail).
    glibc=$(find "$tmp/root" -type f \( -name '*.so*' -o -path '*/bin/*' \) \
        -exec readelf -V {} + 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
        sort -t. -k1,1n -k2,2n | tail -1)
else
    have='' glibc='' unresolved=''
fi

{
    echo "# moeflow GPU bundle, made $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m)" \
        "$(. /etc/os-release 2>/dev/null && echo "$ID $VERSION_ID")"
    echo "tarball $(basename "$tarball")"
    echo "glibc ${glibc:-unknown}"
    echo "unresolved${unresolved:- none}"
    for p in $have; do
        echo "package $p $(dpkg-query -W -f '${Version}' "$p")"
    done
} >"$out/MANIFEST"

kib=$(du -sk "$out" | cut -f1)
n=$(ls "$out/debs" | wc -l | tr -d ' ')
echo "$me: $out: $(basename "$tarball"), $n packages, run.sh;" \
    "$(awk -v k="$kib" 'BEGIN { printf "%.1f", k / 1024 }') MiB (the device tool carries 64 MiB)"
[ -z "$unresolved" ] || echo "$me: warning: no package here provides:$unresolved" >&2
[ "$kib" -le $((60 * 1024)) ] || die "$out is over 60 MiB: the device tool would not carry it"

# ----------------------------------------------------------------- the chroot dry run
[ -n "$chroot" ] || exit 0
# What a bare GPU machine has that matters here: gcc and g++ (nvcc's host compiler), libc's
# headers, python3, coreutils, dpkg; the CUDA toolkit (with NCCL) is bound in from this
# machine read-only. What it lacks: ssh and rsh, Open MPI, the zlib and lp_solve development
# files, autotools, make (the bundle brings them).
[ "$(id -u)" = 0 ] || die "--check-chroot needs root (debootstrap, chroot, mounts)"
for t in chroot unshare mount; do
    command -v $t >/dev/null || die "$t not found"
done
if [ ! -x "$chroot/bin/sh" ]; then
    command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
    echo "$me: debootstrap Debian 12 into $chroot" >&2
    debootstrap --variant=minbase --include=gcc,g++,libc6-dev,python3,xz-utils,file \
        bookworm "$chroot" http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1 ||
        die "debootstrap failed: $(tail -1 "$tmp/debootstrap.log")"
fi
missing=$(chroot "$chroot" sh -c 'for t in ssh rsh mpirun mpicc make autoreconf; do
        command -v $t >/dev/null && echo "$t"; done
    for f in /usr/include/zlib.h /usr/include/lpsolve /usr/include/mpi.h; do
        [ -e $f ] && echo "$f"; done' 2>/dev/null | paste -sd ' ' -)
[ -z "$missing" ] || die "the chroot $chroot has what a bare GPU machine lacks: $missing"
cuda=$(readlink -f "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")/..")
[ -x "$cuda/bin/nvcc" ] || die "no CUDA toolkit found (nvcc) to bind into the chroot"
rm -rf "$chroot/root/gpu-bundle" "$chroot/root/moeflow-gpu"
cp -r "$out" "$chroot/root/gpu-bundle" || die "cannot copy '$out' into '$chroot'"
echo "$me: run.sh in $chroot (CUDA from $cuda; no GPU)" >&2
rc=0
# a private mount namespace: the mounts end with the command
unshare -m sh -c '
    set -e
    c=$1 cuda=$2 budget=$3
    mount --make-rprivate /
    for d in proc sys dev; do mkdir -p "$c/$d"; done
    mount -t proc proc "$c/proc"
    mount --rbind /sys "$c/sys"
    mount --rbind /dev "$c/dev"
    mkdir -p "$c$cuda"
    mount --bind "$cuda" "$c$cuda"
    mount -o remount,bind,ro "$c$cuda"
    ln -sfn "$cuda" "$c/usr/local/cuda"
    set +e
    chroot "$c" env -i PATH=/usr/local/cuda/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
        CUDA_VISIBLE_DEVICES= OUT=/root/moeflow-gpu/out \
        sh /root/gpu-bundle/run.sh --workdir /root/moeflow-gpu --budget "$budget"
' sh "$chroot" "$cuda" "${MOE_CHROOT_BUDGET:-3600}" || rc=$?
rep=$chroot/root/moeflow-gpu/out/report.txt
ok=yes
for s in prefix configure build cpu-2rank-fwd-fp32; do
    grep -q "^$s  *PASS " "$rep" 2>/dev/null || ok=no
done
grep -q '^test_kernels  *SKIP .*no GPU found' "$rep" 2>/dev/null || ok=no
if [ "$rc" = 77 ] && [ "$ok" = yes ]; then
    echo "$me: check-chroot: run.sh reached its first GPU step (report: $rep)"
    exit 0
fi
die "check-chroot: run.sh exited $rc before its first GPU step (report: $rep)"
