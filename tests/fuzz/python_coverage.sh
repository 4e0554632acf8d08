#!/usr/bin/env bash
# The line coverage of the Python harness (tests/fuzz/python_mutation.py): the extension built
# with clang's source-based coverage (CPU only), each entry point fuzzed in-process for RUNS
# executions with the campaign's seed (so the first RUNS executions of a campaign's sequence),
# and the lines of the library headers and of the bindings (python/src) that ran.
#
# Usage: tests/fuzz/python_coverage.sh PY [-n RUNS] [-o OUT] [ENTRY...]
#   PY         an interpreter with torch (and nanobind, to build the extension)
#   -n RUNS    executions per entry point (default 100000)
#   -o OUT     output folder (default build/fuzz-python-coverage)
#   ENTRY...   only these entry points (shell patterns on the names --list prints)
# Env: GRADCOMP_FUZZ_PY_COVERAGE_BUILD  the extension's build folder (default build/py-coverage);
#      LLVM_PROFDATA, LLVM_COV  the tools (default: llvm-profdata-<clang major>, llvm-cov-<clang major>).
#
# Writes under OUT: <entry>.lcov and <entry>.lines per entry point, all.lines, report.txt (per
# source file, all entry points together), logs/, and summary.md (the table). The harness is
# not coverage-guided, so more executions reach only what rarer mutations reach.
# Exit status: 0, 1 if the harness reported a property violation, 2 on a usage or setup error.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT="$(pwd)"
usage() { sed -n '7,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
[[ $# -ge 1 && "$1" != -* ]] || usage
PYTHON="$1"; shift
RUNS=100000
OUT="build/fuzz-python-coverage"
BUILD="${GRADCOMP_FUZZ_PY_COVERAGE_BUILD:-build/py-coverage}"
ONLY=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) RUNS="${2:?}"; shift 2 ;;
    -o) OUT="${2:?}"; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "error: unknown option $1" >&2; usage ;;
    *) ONLY+=("$1"); shift ;;
  esac
done
[[ "${RUNS}" =~ ^[0-9]+$ && "${RUNS}" -gt 0 ]] || { echo "error: RUNS must be a positive integer" >&2; exit 2; }
"${PYTHON}" -c 'import torch, nanobind' 2>/dev/null || { echo "error: ${PYTHON} cannot import torch and nanobind" >&2; exit 2; }
# shellcheck source=llvm_tools.sh
source tests/fuzz/llvm_tools.sh
mkdir -p "${OUT}"
OUT="$(cd "${OUT}" && pwd)"
rm -rf "${OUT:?}"/* && mkdir -p "${OUT}/logs"

# --- The instrumented extension, in a package folder of its own beside the Python sources.
echo "-- coverage build of the extension in ${BUILD}"
cmake -S python -B "${BUILD}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DGRADCOMP_PYTHON_CUDA=OFF -DPython_EXECUTABLE="$(command -v "${PYTHON}")" \
  -DCMAKE_CXX_FLAGS="-fprofile-instr-generate -fcoverage-mapping" \
  -DCMAKE_MODULE_LINKER_FLAGS="-fprofile-instr-generate" >"${OUT}/logs/configure.log"
cmake --build "${BUILD}" --target _core >"${OUT}/logs/build.log"
PKG="${BUILD}/pkg"
rm -rf "${PKG}" && mkdir -p "${PKG}"
cp -r python/gradcomp "${PKG}/gradcomp"
find "${PKG}/gradcomp" -name __pycache__ -prune -exec rm -rf {} +
SO="$(find "${BUILD}/stubgen/gradcomp" -name '_core*.so' | head -n1)"
cp "${SO}" "${PKG}/gradcomp/"
SO="${PKG}/gradcomp/$(basename "${SO}")"

# --- Each entry point in a process of its own: one profile each.
mapfile -t all < <(PYTHONPATH="${PKG}" LLVM_PROFILE_FILE="${OUT}/logs/list.profraw" "${PYTHON}" tests/fuzz/python_mutation.py --list)
entries=()
for e in "${all[@]}"; do
  if [[ ${#ONLY[@]} -eq 0 ]]; then entries+=("${e}"); continue; fi
  for want in "${ONLY[@]}"; do
    # shellcheck disable=SC2053  # a pattern on purpose
    if [[ "${e}" == ${want} ]]; then entries+=("${e}"); break; fi
  done
done
[[ ${#entries[@]} -gt 0 ]] || { echo "error: no entry point matches ${ONLY[*]}" >&2; exit 2; }
slug() { sed -E 's/[^A-Za-z0-9._-]/_/g; s/^_+//; s/_+$//' <<<"$1"; }
RC=0
names=()
for e in "${entries[@]}"; do
  s="$(slug "${e}")"
  names+=("${s}")
  echo "-- ${e}: ${RUNS} executions"
  PYTHONPATH="${PKG}" LLVM_PROFILE_FILE="${OUT}/${s}.profraw" "${PYTHON}" tests/fuzz/python_mutation.py \
    --runs "${RUNS}" --in-process --crash-dir "${OUT}/crashes" --out "${OUT}/logs/${s}.md" "${e}" \
    >"${OUT}/logs/${s}.log" 2>&1 || { st=$?; echo "   the harness exited with status ${st}"; [[ ${st} -eq 1 ]] && RC=1; [[ ${st} -eq 1 ]] || exit 2; }
  "${PROFDATA}" merge -sparse "${OUT}/${s}.profraw" -o "${OUT}/${s}.profdata"
  "${COV}" export -format=lcov -instr-profile="${OUT}/${s}.profdata" "${SO}" "${ROOT}/python/include" "${ROOT}/python/src" >"${OUT}/${s}.lcov"
  rm -f "${OUT}/${s}.profraw"
done
# python/include is the repository's include/ (a link): its paths read include/gradcomp/...
python3 tests/fuzz/coverage_lines.py "${OUT}" "${ROOT}/python/" "${names[@]}"

{
  echo "# gradcomp Python entry points: line coverage"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); $(clang++ --version | head -n1)"
  echo "- ${RUNS} executions per entry point (seed 1, in-process); the extension built with"
  echo "  -fprofile-instr-generate -fcoverage-mapping, CPU only"
  echo "- line coverage: the lines of include/gradcomp and python/src compiled into the extension that"
  echo "  the entry point ran; \"all\": a line counts once, covered if any entry point ran it; per"
  echo "  source file: report.txt"
  echo
  echo "| entry point | executions | line coverage |"
  echo "|---|---:|---|"
  for i in "${!entries[@]}"; do
    echo "| ${entries[$i]} | ${RUNS} | $(cat "${OUT}/${names[$i]}.lines") |"
  done
  echo "| all | $((RUNS * ${#entries[@]})) | $(cat "${OUT}/all.lines") |"
} >"${OUT}/summary.md"
echo
cat "${OUT}/summary.md"
exit "${RC}"
