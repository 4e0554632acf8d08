#!/usr/bin/env bash
# The Conan 2 recipe (conanfile.py), with no remote (gradcomp requires nothing):
#   1. `conan create` of this checkout into a fresh Conan home (the detected profile, C++20);
#   2. the README's consumer (its find_package CMakeLists.txt and its conanfile.txt) through
#      CMakeDeps and CMakeToolchain builds and runs the quickstart;
#   3. what that consumer is told: find_package(gradcomp 9.9), an unknown component, and
#      COMPONENTS cuda on a machine without the CUDA toolkit fail at configure time with the
#      reason; with nvcc, a consumer that enables CUDA gets gradcomp::cuda with the CUDA runtime.
# Conan itself is pip-installed once into a virtual environment kept outside the checkout.
#
#   tests/packaging/conan.sh [work folder, default build/packaging/conan]
#
# Environment: GRADCOMP_CONAN_VENV, the virtual environment holding Conan (default
# ~/.cache/gradcomp-ci/conan; created, with `pip install conan`, when it has none).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="${1:-${repo}/build/packaging/conan}"
venv="${GRADCOMP_CONAN_VENV:-${HOME}/.cache/gradcomp-ci/conan}"
rm -rf "${work}"
mkdir -p "${work}"
work="$(cd "${work}" && pwd)"

if ! "${venv}/bin/conan" --version >/dev/null 2>&1; then
  rm -rf "${venv}"
  python3 -m venv "${venv}"
  "${venv}/bin/pip" install --quiet "conan>=2,<3"
fi
conan="${venv}/bin/conan"
"${conan}" --version

# A Conan home of its own: the recipe under test and nothing else in the cache.
export CONAN_HOME="${work}/home"
"${conan}" profile detect
settings=(-s compiler.cppstd=20 -s build_type=Release)

# --- 1. the package -------------------------------------------------------------------------
echo "== conan: create"
(set -x; "${conan}" create "${repo}" "${settings[@]}")

# --- 2. the README's consumer ---------------------------------------------------------------
echo "== conan: the README's consumer"
cmake -DREADME="${repo}/README.md" -DOUT="${work}/app" "-DROUTES=find_package;conan" \
  -P "${repo}/tests/packaging/readme-consumer.cmake"
(set -x; "${conan}" install "${work}/app" --output-folder="${work}/app/build" "${settings[@]}")
(set -x; cmake -S "${work}/app" -B "${work}/app/build" -G Ninja -DCMAKE_TOOLCHAIN_FILE=conan_toolchain.cmake \
  -DCMAKE_BUILD_TYPE=Release)
cmake --build "${work}/app/build" --parallel 2
out="$("${work}/app/build/app")"
echo "${out}"
if [[ "${out}" != *"sum[42] = 1"* ]]; then
  echo "error: the quickstart printed the wrong sum" >&2
  exit 1
fi

# --- 3. what a consumer is told -------------------------------------------------------------
echo "== conan: requests"
request() {  # <name> <cmake -D arguments...>
  local name="$1"
  shift
  cmake -DGRADCOMP_SOURCE_DIR="${repo}" -DGENERATOR=Ninja -DMAKE_PROGRAM="$(command -v ninja)" \
    -DCXX_COMPILER="$(command -v c++)" -DCONFIG=Release -DCONSUMER_BINARY_DIR="${work}/request-${name}" \
    -DTOOLCHAIN="${work}/app/build/conan_toolchain.cmake" "$@" -P "${repo}/tests/packaging/request.cmake"
}
request version -DREQUEST=9.9 '-DEXPECT_ERROR=compatible with requested version "9\.9"'
request unknown_component "-DREQUEST=0.1 COMPONENTS mpi" "-DEXPECT_ERROR=gradcomp has no component 'mpi'"
request cuda_without_toolkit "-DREQUEST=0.1 COMPONENTS cuda" -DHIDE_CUDA=ON \
  '-DEXPECT_ERROR=gradcomp component cuda \(gradcomp::cuda\) is not available: no CUDA compiler was found: the CUDA toolkit is missing'
nvcc="${CUDACXX:-$(command -v nvcc || true)}"
if [[ -z "${nvcc}" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [[ -n "${nvcc}" ]]; then
  # Conan's toolchain sets CMAKE_CXX_STANDARD 20, which CMake takes for CUDA too; CMake before
  # 3.25.2 has no nvcc switch for C++20 and fails to enable CUDA at all: C++17 for CUDA there
  # (gradcomp::cuda then asks for -std=c++20 itself).
  cuda_std=()
  if [[ "$(printf '%s\n' 3.25.2 "$(cmake --version | head -n1 | awk '{print $3}')" | sort -V | head -n1)" != 3.25.2 ]]; then
    cuda_std=(-DCUDA_STANDARD=17)
  fi
  request cuda "-DREQUEST=0.1 COMPONENTS cuda" "-DLANGUAGES=CXX CUDA" -DEXPECT_TARGETS=gradcomp::cuda \
    -DCUDA_COMPILER="${nvcc}" -DCUDA_ARCHITECTURES=90 "${cuda_std[@]}"
else
  echo "nvcc not found: the CUDA consumer is skipped"
fi

echo "== conan: the recipe packages gradcomp and its consumer builds and runs the quickstart"
