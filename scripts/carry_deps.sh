#!/usr/bin/env bash
# evalrun's build and run-time dependencies, carried to a machine that has a compiler and a libtorch but
# no Debian packages and no package access (the GPU machine: CUDA, nvcc and a PyTorch that holds a
# libtorch, nothing else; docs/devices.md, "Building where there are no Debian packages").
#
#   scripts/carry_deps.sh pack [TARBALL]        here (apt): download the Debian packages below, unpack them,
#                                                drop what a build never reads (docs, man pages, static
#                                                libraries other than GoogleTest's), write TARBALL (default
#                                                .carry/evalrun-deps.tar.xz, an ignored path: carry .carry)
#   scripts/carry_deps.sh unpack TARBALL PREFIX  anywhere: extract into PREFIX (never over /), point the
#                                                absolute paths of pkg-config files and h5pcc at PREFIX,
#                                                write PREFIX/env.sh
#   scripts/carry_deps.sh prove [TARGET...]     here: pack if needed, unpack afresh into build-carry/prefix,
#                                                then in a private mount namespace hide the system's copy of
#                                                every carried package, configure build-carry/ against the
#                                                prefix, build the targets (default below), run their tests,
#                                                and check that every library evalrun needs (libtorch's own
#                                                and the C/C++ runtime aside) comes from the prefix or .deps/
#
# `source PREFIX/env.sh` sets PATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH, CMAKE_PREFIX_PATH, Open MPI's
# OPAL_PREFIX / OPAL_SYSCONFDIR (Open MPI relocates to the prefix with them) and EVALRUN_CARRY_CMAKE_ARGS
# (the MPI and HDF5 compiler wrappers and the Debian library directory, for cmake).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# What evalrun links or runs, as Debian 12 packages. Not carried: the C library, the C++ runtime
# (libstdc++, libgcc, libgomp: the target's compiler brings newer ones, and an older copy ahead of them
# on LD_LIBRARY_PATH would break code it compiles), and libtorch with its own libraries.
dev_packages=(
  libopenmpi-dev libhdf5-openmpi-dev libtoml11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev
  libgtest-dev googletest libicu-dev libpcre2-dev libdnnl-dev
  libaec-dev libcurl4-openssl-dev libssl-dev  # h5pcc links -lsz -lcurl -lcrypto
)
tool_packages=(
  openmpi-bin openmpi-common cmake cmake-data pkgconf pkgconf-bin
)
# The shared libraries of the above, found with ldd over evalrun, Open MPI's and PMIx's plugins, cmake
# and pkgconf (the ldd closure, mapped to packages with dpkg -S).
lib_packages=(
  libopenmpi3 libpmix2 libhwloc15 libhwloc-plugins libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1
  libucx0 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200
  libnuma1 libmunge2 libpciaccess0 libxnvctrl0 libx11-6 libx11-data libxau6 libxcb1 libxdmcp6 libxext6
  libbsd0 libmd0 libudev1 ocl-icd-libopencl1
  libhdf5-openmpi-103-1 libhdf5-openmpi-hl-100 libsz2 libaec0 libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libldap-2.5-0
  libsasl2-2 libsasl2-modules-db libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1
  libcom-err2 libbrotli1 libssl3 libgnutls30 libidn2-0 libunistring2 libnettle8 libhogweed6 libgmp10
  libp11-kit0 libtasn1-6 libffi8 libzstd1
  libspdlog1.10 libfmt9 libicu72 libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libdnnl2
  zlib1g zlib1g-dev  # h5pcc links -lz; the target may lack the development link
  libprotobuf32 libprotobuf-lite32  # sentencepiece (.deps/, carried beside) needs protobuf-lite
  libarchive13 libacl1 libbz2-1.0 liblz4-1 liblzma5 libxml2 libjsoncpp25 librhash0 libuv1 libuuid1
  libpkgconf3
)
packages=("${dev_packages[@]}" "${tool_packages[@]}" "${lib_packages[@]}")
arch_lib=usr/lib/x86_64-linux-gnu

die() { echo "carry_deps: $*" >&2; exit 2; }

pack() (  # a subshell: its EXIT trap removes the work folder
  local tarball=${1:-$root/.carry/evalrun-deps.tar.xz}
  command -v apt-get >/dev/null || die "pack needs apt-get (Debian 12)"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/debs" "$work/tree" "$(dirname "$tarball")"
  (cd "$work/debs" && apt-get download -q "${packages[@]}" >/dev/null 2>"$work/apt.log") ||
    { cat "$work/apt.log" >&2; die "apt-get download failed"; }
  for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/tree"; done
  (cd "$work/tree" && rm -rf usr/share/doc usr/share/man usr/share/info usr/share/lintian usr/share/bug \
     usr/share/locale usr/share/emacs usr/share/vim usr/share/aclocal usr/share/bash-completion)
  find "$work/tree" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
  # The names Debian's alternatives give (dpkg -x runs no maintainer scripts): the MPI and HDF5 wrappers.
  for w in mpicc mpicxx mpic++ mpirun mpiexec; do ln -sf "$w.openmpi" "$work/tree/usr/bin/$w"; done
  ln -sf h5pcc.openmpi "$work/tree/usr/bin/h5pcc"
  tar -C "$work/tree" -cJf "$tarball" .
  echo "carry_deps: $tarball ($(du -h "$tarball" | cut -f1), ${#packages[@]} packages)"
)

unpack() {
  local tarball=$1 prefix=$2
  [ -f "$tarball" ] || die "no file $tarball"
  if [ -z "$prefix" ] || [ "$prefix" = "/" ]; then die "unpack needs a prefix other than /"; fi
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  tar -C "$prefix" -xJf "$tarball"
  # pkg-config files name /usr: the prefix instead.
  find "$prefix" -name '*.pc' -exec sed -i -E "s#(^|[ =:'\"])/usr([/ '\"]|$)#\1$prefix/usr\2#g" {} +
  # h5pcc: its prefix, and shared libraries by default (pack dropped the static ones).
  sed -i -E -e "s#^prefix=\"/usr\"#prefix=\"$prefix/usr\"#" -e 's#^STATIC_AVAILABLE="yes"#STATIC_AVAILABLE="no"#' \
    "$prefix/usr/bin/h5pcc.openmpi"
  # Some packages keep their libraries in /lib (Debian 12 is not merged at the package level).
  local ld="$prefix/$arch_lib:$prefix/lib/x86_64-linux-gnu:$prefix/$arch_lib/openmpi/lib:$prefix/$arch_lib/hdf5/openmpi"
  cat > "$prefix/env.sh" <<EOF
# evalrun's carried dependencies (scripts/carry_deps.sh unpack): source this before cmake and mpirun.
export OPAL_PREFIX="$prefix/usr" OPAL_SYSCONFDIR="$prefix/etc/openmpi"
export PATH="$prefix/usr/bin\${PATH:+:\$PATH}"
export LD_LIBRARY_PATH="$ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$prefix/$arch_lib/pkgconfig:$prefix/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
export CMAKE_PREFIX_PATH="$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export EVALRUN_CARRY_CMAKE_ARGS="-DCMAKE_LIBRARY_ARCHITECTURE=x86_64-linux-gnu -DMPI_C_COMPILER=$prefix/usr/bin/mpicc -DMPIEXEC_EXECUTABLE=$prefix/usr/bin/mpiexec -DHDF5_C_COMPILER_EXECUTABLE=$prefix/usr/bin/h5pcc"
EOF
  echo "carry_deps: unpacked into $prefix; source $prefix/env.sh"
}

# The tests `prove` runs by default: the HDF5, MPI and device paths the GPU check relies on.
prove_targets=(evalrun evalrun_aiu_cpu_plugin io_hdf5_test dist_test device_test device_residency_test mpi_run_test device_run_test)
prove_tests='^(H5Test|Batches|Serialize|Sharding|Placement|AiuEnv|Plan|Plugin|MpiRun|DeviceRun|DeviceResidency)\.'

prove() {
  [ "$(id -u)" -eq 0 ] || die "prove needs root (a private mount namespace hides the system packages)"
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=("${prove_targets[@]}")
  # The prefix is unpacked afresh each time, at the same place (build-carry/'s cache names its paths).
  local work=$root/build-carry tarball=$root/.carry/evalrun-deps.tar.xz
  [ -f "$tarball" ] || pack "$tarball"
  rm -rf "$work/prefix"
  mkdir -p "$work"
  unpack "$tarball" "$work/prefix" >/dev/null
  # Hidden: every carried package but those Debian's libtorch (standing in for the target's) loads
  # itself; those libraries are checked below to come from the prefix instead.
  local torch_pkgs hide=()
  # (dpkg -S once over every path, with and without /usr: some packages own /lib/... names.)
  torch_pkgs=$(ldd /usr/lib/x86_64-linux-gnu/libtorch.so | awk '/=>/ {print $3}' | xargs -r readlink -f |
               sed 'p; s#^/usr##' | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 | sort -u || true)
  for p in "${packages[@]}"; do
    grep -qx "$p" <<<"$torch_pkgs" || hide+=("$p")
  done
  echo "carry_deps: hiding ${#hide[@]} of ${#packages[@]} packages' system files"
  printf '%s\n' "${hide[@]}" > "$work/hidden.txt"
  unshare -m --propagation private bash -s "$root" "$work/prefix" "$prove_tests" "${targets[*]}" "$work/hidden.txt" <<'INNER'
set -euo pipefail
root=$1 prefix=$2 tests=$3 targets=$4 hidden=$5
for p in $(cat "$hidden"); do
  dpkg -L "$p" 2>/dev/null | while read -r f; do
    if [ -f "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; fi
  done
done
source "$prefix/env.sh"
[ ! -s /usr/include/hdf5/openmpi/hdf5.h ] || { echo "carry_deps: the system HDF5 is still visible" >&2; exit 1; }
build=$(dirname "$prefix")
# shellcheck disable=SC2086
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEVALRUN_WERROR=ON $EVALRUN_CARRY_CMAKE_ARGS
grep -E '^(MPI_C_HEADER_DIR|HDF5_C_LIBRARY_hdf5|spdlog_DIR|toml11_DIR|EVALRUN_DNNL_LIBRARY):' "$build/CMakeCache.txt"
# shellcheck disable=SC2086
cmake --build "$build" -j"$(nproc)" --target $targets
cd "$build"
ctest -R "$tests" --output-on-failure -j"$(nproc)"
# Every library evalrun needs, and what those need in turn, comes from the prefix (or .deps/), but for
# the C and C++ runtime and libtorch with what it loads itself (standing in for the target's).
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
declare -A where seen
while read -r so path; do where[$so]=$path; done < <(ldd "$build/src/app/evalrun" | awk '/=>/ {print $1, $3}')
mapfile -t queue < <(needed "$build/src/app/evalrun")
bad="" checked=0
while [ ${#queue[@]} -gt 0 ]; do
  so=${queue[0]}
  queue=("${queue[@]:1}")
  [ -z "${seen[$so]:-}" ] || continue
  seen[$so]=1
  case $so in
    libtorch*|libc10*|libc.so*|libm.so*|libstdc++*|libgcc_s*|libgomp*|ld-linux*|libpthread*|libdl.so*|librt.so*|libresolv*|libutil*) continue ;;
  esac
  path=${where[$so]:-}
  case $path in
    "$prefix"/*|"$root"/.deps/*) checked=$((checked + 1)) ;;
    *) bad+=" $so (${path:-not found})" ;;
  esac
  if [ -n "$path" ]; then mapfile -t -O "${#queue[@]}" queue < <(needed "$path"); fi
done
[ -z "$bad" ] || { echo "carry_deps: libraries evalrun needs that the prefix does not hold:$bad" >&2; exit 1; }
echo "carry_deps: the $checked libraries evalrun needs (libtorch's own aside) all come from the prefix or .deps/"
echo "carry_deps: proved: built and tested against $prefix"
INNER
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  unpack) [ $# -eq 3 ] || die "usage: carry_deps.sh unpack TARBALL PREFIX"; unpack "$2" "$3" ;;
  prove) shift; prove "$@" ;;
  *) die "usage: carry_deps.sh pack [TARBALL] | unpack TARBALL PREFIX | prove [TARGET...]" ;;
esac
