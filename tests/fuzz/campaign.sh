#!/usr/bin/env bash
# A fuzz campaign: every libFuzzer target in build/fuzz run to a number of executions, the
# inputs it found merged into a work copy of its corpus, the line coverage of the library
# headers from that corpus, and a Markdown summary; with --python, the Python entry points
# too (tests/fuzz/python_mutation.py, a byte-mutation harness).
#
# Usage: tests/fuzz/campaign.sh [-n RUNS] [-o OUT] [-j JOBS] [--no-build] [--no-coverage] [--python PY] [TARGET...]
#   -n RUNS        executions per target (env GRADCOMP_FUZZ_RUNS; default 10000000)
#   -o OUT         output folder (env GRADCOMP_FUZZ_OUT; default build/fuzz-campaign)
#   -j JOBS        fuzzing processes per target (libFuzzer -fork=JOBS) and build jobs
#                  (env GRADCOMP_FUZZ_JOBS; default: the number of cores)
#   --no-build     use build/fuzz as it is (default: configure and build the fuzz preset)
#   --no-coverage  skip the coverage build and report
#   --python PY    also run tests/fuzz/python_mutation.py with the interpreter PY (gradcomp and
#                  torch importable; env GRADCOMP_FUZZ_PYTHON): RUNS executions per Python entry
#                  point, JOBS entry points at once, each in a worker process; and, unless
#                  --no-coverage, its line coverage (tests/fuzz/python_coverage.sh)
#   TARGET...      only these targets (default: every *_fuzz executable in build/fuzz)
# Env: GRADCOMP_FUZZ_MAX_SECONDS  a time limit per target (and Python entry point) on top of RUNS (default: none);
#      GRADCOMP_FUZZ_COVERAGE_BUILD  the coverage build folder (default build/fuzz-coverage);
#      LLVM_PROFDATA, LLVM_COV  the tools (default: llvm-profdata-<clang major>, llvm-cov-<clang major>).
#
# What it writes under OUT:
#   corpus/<target>/   the work corpus: the repository's seeds (tests/fuzz/corpus/<target>) the
#                      first time, kept between campaigns; the repository's corpora are only read
#   found/<target>/    what this run's fuzzing added (merged into corpus/ with -merge=1)
#   crashes/<target>/  crash-, leak-, timeout- and oom- reproducers (run: <target> <file>)
#   crashes/python/    the Python harness's reproducers (<entry>-it<i>.json and .bin; run:
#                      PY tests/fuzz/python_mutation.py --replay <file>.json)
#   logs/              each target's fuzzing, merge and coverage logs; python.log
#   coverage/          per target: profile, llvm-cov report (<target>.txt), lcov; report.txt: per
#                      header, all targets together
#   python.md          the Python harness's report (its table is also in summary.md)
#   summary.md         the table
# found/, crashes/, logs/ and coverage/ are emptied at the start of a run.
#
# Fork mode stops between jobs, so a target runs RUNS executions or somewhat more (the summary
# gives the count). Exit status: 0, 1 if a target left a reproducer or the Python harness found a
# property violation, 2 on a usage or setup error.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT="$(pwd)"

RUNS="${GRADCOMP_FUZZ_RUNS:-10000000}"
OUT="${GRADCOMP_FUZZ_OUT:-build/fuzz-campaign}"
JOBS="${GRADCOMP_FUZZ_JOBS:-$(nproc)}"
MAX_SECONDS="${GRADCOMP_FUZZ_MAX_SECONDS:-0}"
COV_BUILD="${GRADCOMP_FUZZ_COVERAGE_BUILD:-build/fuzz-coverage}"
PYTHON="${GRADCOMP_FUZZ_PYTHON:-}"
BUILD=1
COVERAGE=1
ONLY=()

usage() { sed -n '7,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) RUNS="${2:?}"; shift 2 ;;
    -o) OUT="${2:?}"; shift 2 ;;
    -j) JOBS="${2:?}"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --no-coverage) COVERAGE=0; shift ;;
    --python) PYTHON="${2:?}"; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "error: unknown option $1" >&2; usage ;;
    *) ONLY+=("$1"); shift ;;
  esac
done
[[ "${RUNS}" =~ ^[0-9]+$ && "${RUNS}" -gt 0 ]] || { echo "error: RUNS must be a positive integer" >&2; exit 2; }
[[ "${JOBS}" =~ ^[0-9]+$ && "${JOBS}" -gt 0 ]] || { echo "error: JOBS must be a positive integer" >&2; exit 2; }
[[ "${MAX_SECONDS}" =~ ^[0-9]+$ ]] || { echo "error: GRADCOMP_FUZZ_MAX_SECONDS must be an integer" >&2; exit 2; }
if [[ -n "${PYTHON}" ]] && ! "${PYTHON}" -c 'import gradcomp, torch' 2>/dev/null; then
  echo "error: ${PYTHON} cannot import gradcomp and torch (--python)" >&2; exit 2
fi
mkdir -p "${OUT}"
OUT="$(cd "${OUT}" && pwd)"

# --- The targets (the same search as .ci/run's fuzz smoke).
if [[ ${BUILD} == 1 ]]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j"${JOBS}"
fi
mapfile -t fuzzers < <(find build/fuzz -type f -name '*_fuzz' -perm -u+x 2>/dev/null | sort)
if [[ ${#ONLY[@]} -gt 0 ]]; then
  picked=()
  for want in "${ONLY[@]}"; do
    hit=""
    for f in "${fuzzers[@]}"; do [[ "$(basename "${f}")" == "${want}" ]] && hit="${f}"; done
    [[ -n "${hit}" ]] || { echo "error: no fuzz target ${want} in build/fuzz" >&2; exit 2; }
    picked+=("${hit}")
  done
  fuzzers=("${picked[@]}")
fi
[[ ${#fuzzers[@]} -gt 0 ]] || { echo "error: no *_fuzz executables in build/fuzz (build the fuzz preset)" >&2; exit 2; }
names=()
for f in "${fuzzers[@]}"; do names+=("$(basename "${f}")"); done

rm -rf "${OUT}/found" "${OUT}/crashes" "${OUT}/logs" "${OUT}/coverage"
mkdir -p "${OUT}/corpus" "${OUT}/found" "${OUT}/crashes" "${OUT}/logs" "${OUT}/coverage"

declare -A BIN EXECS RATE SECS SEEDS FINAL MERGED CRASHES LINES
limit=()
if [[ "${MAX_SECONDS}" -gt 0 ]]; then limit=(-max_total_time="${MAX_SECONDS}"); fi

# --- Fuzzing, then the merge into the work corpus.
for i in "${!fuzzers[@]}"; do
  fuzzer="${fuzzers[$i]}"
  name="${names[$i]}"
  BIN[${name}]="${fuzzer}"
  corpus="${OUT}/corpus/${name}"
  found="${OUT}/found/${name}"
  crashes="${OUT}/crashes/${name}"
  mkdir -p "${found}" "${crashes}"
  if [[ ! -d "${corpus}" ]]; then
    mkdir -p "${corpus}"
    if [[ -d "tests/fuzz/corpus/${name}" ]]; then cp -rp "tests/fuzz/corpus/${name}/." "${corpus}/"; fi
  fi
  SEEDS[${name}]="$(find "${corpus}" -type f | wc -l)"
  echo "-- ${name}: ${RUNS} executions, ${JOBS} process(es)"
  start=${SECONDS}
  # New inputs go to found/ (the first folder); crashes are kept and fuzzing goes on.
  "${fuzzer}" -fork="${JOBS}" -runs="${RUNS}" "${limit[@]}" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -timeout=10 -rss_limit_mb=4096 -print_funcs=0 -artifact_prefix="${crashes}/" "${found}" "${corpus}" \
    >"${OUT}/logs/${name}.fuzz.log" 2>&1 || echo "   (the fuzzer exited with status $?: see logs/${name}.fuzz.log)"
  SECS[${name}]=$((SECONDS - start))
  # The fork parent's last status line: "#<runs>: cov: ... exec/s <n> oom/timeout/crash: a/b/c ...".
  last="$(grep -E '^#[0-9]+:' "${OUT}/logs/${name}.fuzz.log" | tail -n1 || true)"
  EXECS[${name}]="$(sed -nE 's/^#([0-9]+):.*/\1/p' <<<"${last}")"
  RATE[${name}]="$(sed -nE 's/.* exec\/s ([0-9]+) .*/\1/p' <<<"${last}")"
  "${fuzzer}" -merge=1 -timeout=10 -rss_limit_mb=4096 -artifact_prefix="${crashes}/" "${corpus}" "${found}" \
    >"${OUT}/logs/${name}.merge.log" 2>&1 || echo "   (the merge exited with status $?: see logs/${name}.merge.log)"
  MERGED[${name}]="$(sed -nE 's/^MERGE-OUTER: ([0-9]+) new files.*/\1/p' "${OUT}/logs/${name}.merge.log" | tail -n1)"
  FINAL[${name}]="$(find "${corpus}" -type f | wc -l)"
  CRASHES[${name}]="$(find "${crashes}" -type f | wc -l)"
  echo "   ${EXECS[${name}]:-?} executions in ${SECS[${name}]}s (${RATE[${name}]:-?}/s), corpus ${SEEDS[${name}]} -> ${FINAL[${name}]}, reproducers: ${CRASHES[${name}]}"
done

# --- The Python entry points: the byte-mutation harness, RUNS executions each (and the time
# limit), its reproducers in crashes/python, its report in python.md.
PY_RC=0
if [[ -n "${PYTHON}" ]]; then
  echo "-- Python entry points (tests/fuzz/python_mutation.py): ${RUNS} executions each, ${JOBS} worker(s)"
  rm -f "${OUT}/python.md"  # a previous campaign's
  py_limit=()
  if [[ "${MAX_SECONDS}" -gt 0 ]]; then py_limit=(--seconds "${MAX_SECONDS}"); fi
  start=${SECONDS}
  "${PYTHON}" tests/fuzz/python_mutation.py --runs "${RUNS}" "${py_limit[@]}" -j "${JOBS}" \
    --crash-dir "${OUT}/crashes/python" --out "${OUT}/python.md" >"${OUT}/logs/python.log" 2>&1 || PY_RC=$?
  echo "   done in $((SECONDS - start))s, status ${PY_RC} (0: no property violation; see python.md)"
  if [[ ${COVERAGE} == 1 ]]; then
    # Its coverage: an instrumented extension, the first executions of each entry point's sequence.
    py_cov_runs=$((RUNS < 100000 ? RUNS : 100000))
    echo "-- Python entry points' line coverage (tests/fuzz/python_coverage.sh, ${py_cov_runs} executions each)"
    tests/fuzz/python_coverage.sh "${PYTHON}" -n "${py_cov_runs}" -o "${OUT}/coverage/python" \
      >"${OUT}/logs/python-coverage.log" 2>&1 || echo "   (python_coverage.sh exited with status $?: see logs/python-coverage.log)"
  fi
fi

# --- Coverage: the targets built with clang's source-based coverage, the final corpus replayed.
COV_NOTE=""
COMBINED="-"
if [[ ${COVERAGE} == 1 ]]; then
  # shellcheck source=llvm_tools.sh
  source tests/fuzz/llvm_tools.sh
  echo "-- coverage build in ${COV_BUILD} (${PROFDATA##*/}, ${COV##*/})"
  cmake -S . -B "${COV_BUILD}" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
    -DGRADCOMP_BUILD_TESTS=OFF -DGRADCOMP_BUILD_FUZZERS=ON -DGRADCOMP_ENABLE_CUDA=OFF \
    -DGRADCOMP_BUILD_EXAMPLES=OFF -DGRADCOMP_BUILD_BENCHMARKS=OFF \
    -DCMAKE_CXX_FLAGS="-O1 -fprofile-instr-generate -fcoverage-mapping" \
    -DCMAKE_EXE_LINKER_FLAGS="-fprofile-instr-generate" >"${OUT}/logs/coverage-configure.log"
  cmake --build "${COV_BUILD}" -j"${JOBS}" --target "${names[@]}" >"${OUT}/logs/coverage-build.log"
  for name in "${names[@]}"; do
    bin="$(find "${COV_BUILD}" -type f -name "${name}" -perm -u+x | head -n1)"
    LLVM_PROFILE_FILE="${OUT}/coverage/${name}.profraw" "${bin}" -runs=0 "${OUT}/corpus/${name}" \
      >"${OUT}/logs/${name}.coverage.log" 2>&1 || echo "   (${name}: the corpus replay exited with status $?)"
    "${PROFDATA}" merge -sparse "${OUT}/coverage/${name}.profraw" -o "${OUT}/coverage/${name}.profdata"
    "${COV}" report -instr-profile="${OUT}/coverage/${name}.profdata" "${bin}" "${ROOT}/include" >"${OUT}/coverage/${name}.txt"
    "${COV}" export -format=lcov -instr-profile="${OUT}/coverage/${name}.profdata" "${bin}" "${ROOT}/include" >"${OUT}/coverage/${name}.lcov"
  done
  # Line coverage from the lcov records: each target's, and all targets' together (a line counts
  # once, covered if any target ran it). One merged profile would not do: the targets' binaries
  # disagree on some functions' hashes (LLVMFuzzerTestOneInput first), and llvm-cov drops those.
  python3 tests/fuzz/coverage_lines.py "${OUT}/coverage" "${ROOT}/" "${names[@]}"
  for name in "${names[@]}"; do LINES[${name}]="$(cat "${OUT}/coverage/${name}.lines")"; done
  COMBINED="$(cat "${OUT}/coverage/all.lines")"
else
  COV_NOTE="Coverage skipped (--no-coverage)."
fi

# --- The summary.
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then commit="${commit} (with uncommitted changes)"; fi
total_execs=0
total_crashes=0
{
  echo "# gradcomp fuzz campaign"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit ${commit}; $(clang++ --version | head -n1)"
  echo "- ${RUNS} executions asked per target, libFuzzer -fork=${JOBS}; fuzz preset (ASan + UBSan, -O1)"
  echo "- line coverage: the lines of include/gradcomp that the target compiles, run by its final corpus"
  echo "  (a coverage build without sanitizers); \"all\": a line counts once, covered if any target ran it;"
  echo "  per header: coverage/report.txt"
  echo
  echo "| target | executions | executions/s | time (s) | corpus (seeds -> final, merged) | line coverage of the headers | crashes |"
  echo "|---|---:|---:|---:|---|---|---:|"
  for name in "${names[@]}"; do
    e="${EXECS[${name}]:-?}"
    c="${CRASHES[${name}]}"
    [[ "${e}" =~ ^[0-9]+$ ]] && total_execs=$((total_execs + e))
    total_crashes=$((total_crashes + c))
    echo "| ${name} | ${e} | ${RATE[${name}]:-?} | ${SECS[${name}]} | ${SEEDS[${name}]} -> ${FINAL[${name}]}, +${MERGED[${name}]:-?} | ${LINES[${name}]:--} | ${c} |"
  done
  echo "| all | ${total_execs} | | | | ${COMBINED} | ${total_crashes} |"
  echo
  if [[ -n "${COV_NOTE}" ]]; then echo "${COV_NOTE}"; echo; fi
  if [[ ${total_crashes} -gt 0 ]]; then
    echo "## Reproducers"
    echo
    for name in "${names[@]}"; do
      while IFS= read -r f; do echo "- \`${BIN[${name}]} ${f}\`"; done < <(find "${OUT}/crashes/${name}" -type f | sort)
    done
  else
    echo "No crashes, leaks, timeouts or out-of-memory inputs."
  fi
  if [[ -n "${PYTHON}" ]]; then
    echo
    echo "## Python entry points (tests/fuzz/python_mutation.py)"
    echo
    echo "A byte-mutation harness through the Python bindings and gradcomp.restart (\`${PYTHON}\`)."
    echo "Reproducers: crashes/python (replay: \`--replay <file>.json\`)."
    echo
    if [[ -f "${OUT}/python.md" ]]; then
      sed -e '1,/^$/d' -e 's/^## /### /' "${OUT}/python.md"  # its title dropped, its sections one level down
    else
      echo "The harness wrote no report (status ${PY_RC}): see logs/python.log."
    fi
    echo
    if [[ -f "${OUT}/coverage/python/summary.md" ]]; then
      echo "### Line coverage"
      echo
      sed -e '1,/^$/d' "${OUT}/coverage/python/summary.md"
    else
      echo "Line coverage not measured (--no-coverage, or see logs/python-coverage.log)."
    fi
  fi
} >"${OUT}/summary.md"

echo
cat "${OUT}/summary.md"
if [[ ${total_crashes} -gt 0 || ${PY_RC} -eq 1 ]]; then exit 1; fi
[[ ${PY_RC} -eq 0 ]] || exit 2
