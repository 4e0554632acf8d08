# Sourced by campaign.sh and python_coverage.sh: sets PROFDATA and COV to the LLVM coverage tools
# of clang++'s version (the environment's LLVM_PROFDATA and LLVM_COV first), or exits with 2.
llvm_major="$(clang++ --version | sed -nE 's/.*clang version ([0-9]+).*/\1/p' | head -n1)"
find_llvm_tool() {
  local t
  for t in "$@"; do if command -v "${t}" >/dev/null; then command -v "${t}"; return; fi; done
  return 1
}
PROFDATA="$(find_llvm_tool "${LLVM_PROFDATA:-}" "llvm-profdata-${llvm_major}" llvm-profdata)" || { echo "error: llvm-profdata not found" >&2; exit 2; }
COV="$(find_llvm_tool "${LLVM_COV:-}" "llvm-cov-${llvm_major}" llvm-cov)" || { echo "error: llvm-cov not found" >&2; exit 2; }
