#!/usr/bin/env bash
# The Python package's sdist and wheel:
#   1. `python -m build --sdist python/` makes the sdist. It is self-contained: python/include,
#      a link to the repository's include/, is stored as the headers themselves, and
#      python/LICENSE is a copy of the repository's LICENSE; the listing is checked for both
#      (every file under include/, LICENSE equal to the repository's, no links);
#   2. the sdist is unpacked into a temporary folder outside the checkout, so that no
#      repository include/ lies one folder up, and `python -m build --wheel` builds the wheel
#      from it (no build isolation: scikit-build-core and nanobind come from the given
#      environment, so nothing is downloaded); its CMake project must report the sdist's own
#      include/;
#   3. the wheel goes into a fresh virtual environment with `pip install --no-index`: gradcomp
#      and its files come from the wheel alone; torch, numpy and pytest are the given
#      environment's, seen through a .pth file (links to its site-packages, gradcomp left out),
#      so that no 5 GB of torch is downloaded or copied;
#   4. the package's tests run against it (conftest.py takes the checkout's python/ off
#      sys.path): all of python/tests but the multi-rank training runs, minutes each, which the
#      README's pytest stage runs (test_ddp.py: DDP on 2 and 4 gloo ranks; test_tp.py: tensor
#      parallelism; test_restart.py: killed and restarted runs; test_localsteps.py: local steps
#      on 2 to 4 ranks; integrations/: the trainers, the README's trainer stage), or all of it with
#      GRADCOMP_WHEEL_TESTS=all;
#   5. the unpacked sdist's CMake project is configured once more with
#      -DGRADCOMP_PYTHON_USE_INSTALLED=ON against a `cmake --install` of this checkout, and
#      must take that installed library.
#
#   tests/packaging/wheel.sh <python of an environment with torch, pytest, scikit-build-core,
#                             nanobind> [work folder, default build/packaging/wheel]
#
# `build` and python/pyproject.toml's build requirements are pip-installed into that
# environment when it lacks them. CMAKE_BUILD_PARALLEL_LEVEL (default 2) sets the wheel
# build's jobs; TMPDIR, where the sdist is unpacked, must lie outside the checkout.
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

# --- 1. the sdist ---------------------------------------------------------------------------
echo "== wheel: python -m build --sdist"
(set -x; "${python}" -m build --sdist --no-isolation --outdir "${work}/dist" "${repo}/python")
sdist="${work}/dist/gradcomp-${version}.tar.gz"
# Its listing: the package's files, LICENSE equal to the repository's, every file of the
# repository's include/ (as files: the sdist holds no links).
"${python}" - "${sdist}" "gradcomp-${version}" "${repo}" <<'PY'
import os, sys, tarfile
sdist, top, repo = sys.argv[1:]
with tarfile.open(sdist) as tar:
    members = {m.name: m for m in tar.getmembers()}
    errors = []
    for f in ("pyproject.toml", "CMakeLists.txt", "gradcomp/__init__.py", "gradcomp/ddp/__init__.py", "src/module.cpp",
              "LICENSE"):
        if f"{top}/{f}" not in members:
            errors.append(f"no {f}")
    headers = sorted(os.path.relpath(os.path.join(d, f), repo)
                     for d, _, files in os.walk(os.path.join(repo, "include")) for f in files)
    missing = [h for h in headers if f"{top}/{h}" not in members]
    if missing:
        errors.append(f"{len(missing)} of the {len(headers)} files of include/ missing, e.g. {missing[0]}")
    links = [n for n, m in members.items() if not (m.isfile() or m.isdir())]
    if links:
        errors.append(f"links or special files: {', '.join(links[:5])}")
    if f"{top}/LICENSE" in members:
        with open(os.path.join(repo, "LICENSE"), "rb") as f:
            if tar.extractfile(members[f"{top}/LICENSE"]).read() != f.read():
                errors.append("a LICENSE other than the repository's")
if errors:
    sys.exit("error: the sdist " + "; ".join(errors))
files = [m for m in members.values() if m.isfile()]
print(f"sdist: {len(files)} files, {sum(m.size for m in files)} bytes unpacked, "
      f"{os.path.getsize(sdist)} bytes packed; include/: {len(headers)} files")
PY

# --- 2. the wheel, from the sdist unpacked outside the checkout -----------------------------
echo "== wheel: python -m build --wheel, from the sdist unpacked outside the checkout"
unpacked="$(mktemp -d)"
trap 'rm -rf "${unpacked}"' EXIT
unpacked="$(cd "${unpacked}" && pwd -P)"
case "${unpacked}/" in
  "$(cd "${repo}" && pwd -P)/"*) echo "error: ${unpacked} is inside the checkout; set TMPDIR to a folder outside it" >&2; exit 1 ;;
esac
tar -xzf "${sdist}" -C "${unpacked}"
source_dir="${unpacked}/gradcomp-${version}"
[[ ! -e "${unpacked}/include" ]] || { echo "error: ${unpacked}/include exists" >&2; exit 1; }
(set -x; env -u CMAKE_PREFIX_PATH CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  "${python}" -m build --wheel --no-isolation --outdir "${work}/dist" "${source_dir}") 2>&1 | tee "${work}/wheel-build.log"
grep -qF "gradcomp: headers from ${source_dir}/include" "${work}/wheel-build.log" ||
  { echo "error: the wheel was not built from the sdist's include/ (no 'gradcomp: headers from ${source_dir}/include' in ${work}/wheel-build.log)" >&2; exit 1; }
wheel="$(ls "${work}/dist/gradcomp-${version}-"*.whl)"
for f in gradcomp/__init__.py gradcomp/ddp/__init__.py gradcomp/ddp/gather_sharded.py gradcomp/py.typed gradcomp/_core.pyi \
         "gradcomp-${version}.dist-info/licenses/LICENSE"; do
  "${python}" -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' "${wheel}" "${f}" ||
    { echo "error: the wheel has no ${f}" >&2; exit 1; }
done
"${python}" -c 'import sys, zipfile; n = zipfile.ZipFile(sys.argv[1]).namelist(); sys.exit(not any(x.startswith("gradcomp/_core.") and x.endswith((".so", ".pyd")) for x in n))' "${wheel}" ||
  { echo "error: the wheel has no compiled extension" >&2; exit 1; }

# --- 3. a fresh environment -----------------------------------------------------------------
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

# --- 4. the package's tests -----------------------------------------------------------------
echo "== wheel: the package's tests"
tests=("${repo}/python/tests")
if [[ "${GRADCOMP_WHEEL_TESTS:-quick}" != all ]]; then
  for t in test_ddp.py test_tp.py test_restart.py test_localsteps.py integrations; do tests+=(--ignore="${repo}/python/tests/${t}"); done
fi
(set -x; "${fresh}" -m pytest -q -p no:cacheprovider "${tests[@]}")

# --- 5. an installed gradcomp, when asked for -----------------------------------------------
echo "== wheel: the sdist's CMake project against an installed gradcomp (GRADCOMP_PYTHON_USE_INSTALLED)"
cmake -S "${repo}" -B "${work}/gradcomp-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADCOMP_BUILD_TESTS=OFF \
  -DGRADCOMP_BUILD_EXAMPLES=OFF -DGRADCOMP_BUILD_BENCHMARKS=OFF -DGRADCOMP_ENABLE_CUDA=OFF >/dev/null
cmake --install "${work}/gradcomp-build" --prefix "${work}/prefix" >/dev/null
(set -x; cmake -S "${source_dir}" -B "${work}/installed-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGRADCOMP_PYTHON_USE_INSTALLED=ON -DCMAKE_PREFIX_PATH="${work}/prefix" -DPython_EXECUTABLE="${python}") \
  > "${work}/installed-configure.log" 2>&1 ||
  { cat "${work}/installed-configure.log" >&2; echo "error: the configure against the installed gradcomp failed" >&2; exit 1; }
grep -F "gradcomp: the installed library, ${work}/prefix/" "${work}/installed-configure.log" ||
  { cat "${work}/installed-configure.log" >&2; echo "error: the configure did not take the installed gradcomp in ${work}/prefix" >&2; exit 1; }
echo "== wheel: the sdist builds on its own; the wheel installs alone and its tests pass"
