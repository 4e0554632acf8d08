#!/usr/bin/env bash
# The Python package's sdist and wheel:
#   1. `python -m build python/` makes the sdist, then the wheel from the sdist (no build
#      isolation: scikit-build-core and nanobind come from the given environment, so nothing is
#      downloaded). The sdist holds python/ only; its CMake project finds the C++ library with
#      find_package(gradcomp), here a `cmake --install` of this checkout named by
#      CMAKE_PREFIX_PATH;
#   2. the wheel goes into a fresh virtual environment with `pip install --no-index`: gradcomp
#      and its files come from the wheel alone; torch, numpy and pytest are the given
#      environment's, seen through a .pth file (links to its site-packages, gradcomp left out),
#      so that no 5 GB of torch is downloaded or copied;
#   3. the package's tests run against it (conftest.py takes the checkout's python/ off
#      sys.path): all of python/tests but test_ddp.py (DDP training on 2 and 4 gloo ranks,
#      minutes; the README's pytest stage runs it), or all of it with GRADCOMP_WHEEL_TESTS=all.
#
#   tests/packaging/wheel.sh <python of an environment with torch, pytest, scikit-build-core,
#                             nanobind> [work folder, default build/packaging/wheel]
#
# `build` and python/pyproject.toml's build requirements are pip-installed into that
# environment when it lacks them.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${1:?usage: wheel.sh <python with torch, pytest, scikit-build-core and nanobind> [work folder]}"
work="${2:-${repo}/build/packaging/wheel}"
rm -rf "${work}"
mkdir -p "${work}"
work="$(cd "${work}" && pwd)"
# Run from the work folder: a folder named build/ in the working directory (the checkout's,
# python/'s) would shadow the `build` module.
cd "${work}"

# The build frontend and python/pyproject.toml's build requirements, into that environment
# where they are missing (once: later runs find them).
if ! "${python}" -c 'import build, scikit_build_core, nanobind' 2>/dev/null; then
  mapfile -t requires < <("${python}" -c 'import re, sys; t = open(sys.argv[1]).read(); print("\n".join(re.findall(r"\"([^\"]+)\"", re.search(r"^requires\s*=\s*\[([^\]]*)\]", t, re.M).group(1))))' \
    "${repo}/python/pyproject.toml")
  (set -x; "${python}" -m pip install --quiet build "${requires[@]}")
fi
version="$("${python}" -c 'import re, sys; print(re.search(r"^version = \"([^\"]+)\"", open(sys.argv[1]).read(), re.M).group(1))' \
  "${repo}/python/pyproject.toml")"

# --- 1. sdist, and the wheel from it --------------------------------------------------------
echo "== wheel: the C++ library, installed"
cmake -S "${repo}" -B "${work}/gradcomp-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_TESTS=OFF \
  -DGRADCOMP_BUILD_EXAMPLES=OFF -DGRADCOMP_BUILD_BENCHMARKS=OFF -DGRADCOMP_ENABLE_CUDA=OFF >/dev/null
cmake --install "${work}/gradcomp-build" --prefix "${work}/prefix" >/dev/null

echo "== wheel: python -m build (sdist, then the wheel from the sdist)"
(set -x; CMAKE_PREFIX_PATH="${work}/prefix" CMAKE_BUILD_PARALLEL_LEVEL=2 \
  "${python}" -m build --no-isolation --outdir "${work}/dist" "${repo}/python")
sdist="${work}/dist/gradcomp-${version}.tar.gz"
wheel="$(ls "${work}/dist/gradcomp-${version}-"*.whl)"
for f in pyproject.toml CMakeLists.txt gradcomp/__init__.py; do
  "${python}" -c 'import sys, tarfile; sys.exit(sys.argv[2] not in tarfile.open(sys.argv[1]).getnames())' "${sdist}" "gradcomp-${version}/${f}" ||
    { echo "error: the sdist has no ${f}" >&2; exit 1; }
done
for f in gradcomp/__init__.py gradcomp/py.typed gradcomp/_core.pyi "gradcomp-${version}.dist-info/licenses/LICENSE"; do
  "${python}" -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' "${wheel}" "${f}" ||
    { echo "error: the wheel has no ${f}" >&2; exit 1; }
done
"${python}" -c 'import sys, zipfile; n = zipfile.ZipFile(sys.argv[1]).namelist(); sys.exit(not any(x.startswith("gradcomp/_core.") and x.endswith((".so", ".pyd")) for x in n))' "${wheel}" ||
  { echo "error: the wheel has no compiled extension" >&2; exit 1; }

# --- 2. a fresh environment -----------------------------------------------------------------
echo "== wheel: install into a fresh virtual environment"
"${python}" -m venv --without-pip "${work}/venv"  # the given environment's pip installs into it
fresh="${work}/venv/bin/python"
shared="${work}/shared-site-packages"
mkdir -p "${shared}"
site="$("${python}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
for entry in "${site}"/*; do
  case "$(basename "${entry}")" in
    gradcomp | gradcomp-* | gradcomp.* | __pycache__ | *.pth) continue ;;
  esac
  ln -s "${entry}" "${shared}/"
done
echo "${shared}" > "$("${fresh}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gradcomp-wheel-test-shared.pth"
(set -x; "${python}" -m pip --python "${fresh}" install --quiet --no-index "${wheel}")
installed="$("${fresh}" -c 'import gradcomp, os; print(os.path.dirname(gradcomp.__file__))')"
case "${installed}" in
  "${work}/venv/"*) echo "gradcomp ${version} from the wheel: ${installed}" ;;
  *) echo "error: gradcomp was imported from ${installed}, not the fresh environment" >&2; exit 1 ;;
esac

# --- 3. the package's tests -----------------------------------------------------------------
echo "== wheel: the package's tests"
tests=("${repo}/python/tests")
if [[ "${GRADCOMP_WHEEL_TESTS:-quick}" != all ]]; then tests+=(--ignore="${repo}/python/tests/test_ddp.py"); fi
(set -x; "${fresh}" -m pytest -q -p no:cacheprovider "${tests[@]}")
echo "== wheel: sdist and wheel built; the wheel installs alone and its tests pass"
