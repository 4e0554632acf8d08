#!/usr/bin/env bash
# The vcpkg port (ports/gradcomp), offline, with the vcpkg root in VCPKG_ROOT:
#   1. classic mode: `vcpkg install gradcomp --overlay-ports=ports` (gradcomp[cuda] where nvcc
#      is found), then the README's find_package consumer through vcpkg's toolchain file
#      builds and runs the quickstart;
#   2. what a consumer of that install is told: find_package(gradcomp 9.9) and COMPONENTS cuda
#      on a machine without the CUDA toolkit fail at configure time with the reason; with
#      nvcc, a consumer that enables CUDA gets gradcomp::cuda;
#   3. manifest mode: the README's vcpkg.json beside the same consumer, the port from
#      VCPKG_OVERLAY_PORTS, builds and runs the quickstart.
# Every vcpkg folder it writes (downloads, buildtrees, packages, installed) is under the work
# folder, as the vcpkg root may be read-only.
#
#   VCPKG_ROOT=<vcpkg root> tests/packaging/vcpkg.sh [work folder, default build/packaging/vcpkg]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${VCPKG_ROOT:?set VCPKG_ROOT to a vcpkg root (the folder holding the vcpkg executable)}"
work="${1:-${repo}/build/packaging/vcpkg}"
rm -rf "${work}"
mkdir -p "${work}/downloads"
work="$(cd "${work}" && pwd)"

# Offline: the system's cmake and ninja, no metrics, no binary cache (its ABI hash does not
# cover a local port's source tree), downloads in the work folder.
export VCPKG_ROOT VCPKG_FORCE_SYSTEM_BINARIES=1 VCPKG_DISABLE_METRICS=1 VCPKG_BINARY_SOURCES=clear
export VCPKG_DOWNLOADS="${work}/downloads"
vcpkg="${VCPKG_ROOT}/vcpkg"
toolchain="${VCPKG_ROOT}/scripts/buildsystems/vcpkg.cmake"
scratch=(--x-buildtrees-root="${work}/buildtrees" --x-packages-root="${work}/packages")
generator=(-G Ninja)
if ! command -v ninja >/dev/null; then generator=(); fi

nvcc="${CUDACXX:-$(command -v nvcc || true)}"
if [[ -z "${nvcc}" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
spec=gradcomp
if [[ -n "${nvcc}" ]]; then spec="gradcomp[cuda]"; fi

run_quickstart() {  # <build dir>
  local out
  out="$("$1/app")"
  echo "${out}"
  if [[ "${out}" != *"sum[42] = 1"* ]]; then
    echo "error: the quickstart printed the wrong sum" >&2
    exit 1
  fi
}

# --- 1. classic mode ------------------------------------------------------------------------
echo "== vcpkg: classic mode, ${spec}"
(set -x; "${vcpkg}" install "${spec}" --overlay-ports="${repo}/ports" "${scratch[@]}" --x-install-root="${work}/classic")
config="$(find "${work}/classic" -path '*/share/gradcomp/gradcomp-config.cmake' | head -n1)"
triplet_dir="$(cd "$(dirname "${config}")/../.." && pwd)"  # installed/<triplet>
[[ -f "${triplet_dir}/share/gradcomp/copyright" ]] || { echo "error: no share/gradcomp/copyright" >&2; exit 1; }
[[ -f "${triplet_dir}/include/gradcomp/gradcomp.hpp" ]] || { echo "error: no include/gradcomp/gradcomp.hpp" >&2; exit 1; }
if [[ "${spec}" == *cuda* && ! -f "${triplet_dir}/share/gradcomp/gradcomp-cuda-targets.cmake" ]]; then
  echo "error: gradcomp[cuda] installed no gradcomp-cuda-targets.cmake" >&2
  exit 1
fi

cmake -DREADME="${repo}/README.md" -DOUT="${work}/app" -DROUTES=find_package -P "${repo}/tests/packaging/readme-consumer.cmake"
(set -x; cmake -S "${work}/app" -B "${work}/app-classic" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="${toolchain}" -DVCPKG_MANIFEST_MODE=OFF -DVCPKG_INSTALLED_DIR="${work}/classic")
cmake --build "${work}/app-classic" --parallel 2
run_quickstart "${work}/app-classic"

# --- 2. what a consumer is told -------------------------------------------------------------
echo "== vcpkg: requests the install cannot meet"
request() {  # <name> <cmake -D arguments...>
  local name="$1"
  shift
  cmake -DGRADCOMP_SOURCE_DIR="${repo}" -DGENERATOR="${generator[1]:-Unix Makefiles}" -DMAKE_PROGRAM="$(command -v ninja || command -v make)" \
    -DCXX_COMPILER="$(command -v c++)" -DCONFIG=Release -DCONSUMER_BINARY_DIR="${work}/request-${name}" -DPREFIX="${triplet_dir}" "$@" \
    -P "${repo}/tests/packaging/request.cmake"
}
request version -DREQUEST=9.9 '-DEXPECT_ERROR=compatible with requested version "9\.9"'
if [[ "${spec}" == *cuda* ]]; then
  request cuda_without_toolkit "-DREQUEST=0.1 COMPONENTS cuda" -DHIDE_CUDA=ON \
    '-DEXPECT_ERROR=gradcomp component cuda \(gradcomp::cuda\) is not available: no CUDA compiler was found: the CUDA toolkit is missing'
  request cuda "-DREQUEST=0.1 COMPONENTS cuda" "-DLANGUAGES=CXX CUDA" -DEXPECT_TARGETS=gradcomp::cuda \
    -DCUDA_COMPILER="${nvcc}" -DCUDA_ARCHITECTURES=90
else
  request cuda_without_backend "-DREQUEST=0.1 COMPONENTS cuda" \
    '-DEXPECT_ERROR=gradcomp component cuda \(gradcomp::cuda\) is not available: .*installed without its CUDA backend'
fi

# --- 3. manifest mode -----------------------------------------------------------------------
echo "== vcpkg: manifest mode"
cmake -DREADME="${repo}/README.md" -DOUT="${work}/app-manifest-src" "-DROUTES=find_package;vcpkg" \
  -P "${repo}/tests/packaging/readme-consumer.cmake"
(set -x; cmake -S "${work}/app-manifest-src" -B "${work}/app-manifest" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="${toolchain}" -DVCPKG_OVERLAY_PORTS="${repo}/ports" \
  "-DVCPKG_INSTALL_OPTIONS=--x-buildtrees-root=${work}/buildtrees-manifest;--x-packages-root=${work}/packages-manifest")
if ! compgen -G "${work}/app-manifest/vcpkg_installed/vcpkg/info/gradcomp_*.list" >/dev/null; then
  echo "error: manifest mode did not install gradcomp into ${work}/app-manifest/vcpkg_installed" >&2
  exit 1
fi
cmake --build "${work}/app-manifest" --parallel 2
run_quickstart "${work}/app-manifest"

echo "== vcpkg: the port installs and its consumers build and run the quickstart (classic: ${spec}; manifest: gradcomp)"
