#!/bin/bash
# In-process A/B timing of two versions of gradcomp's headers at n = 1e7.
#   tools/ab/ab.sh A B CASES OPS ROUNDS
# A, B: a git revision, or a directory holding include/gradcomp. CASES: case numbers of
# ab_cases.cpp, comma-separated; OPS: 0 compress, 1 decompress, 2 accumulate, 3 compress
# without a previous threshold. Prints median times, B/A, and each against memcpy.
# Example: tools/ab/ab.sh HEAD~1 . 0,1,10 0 20
set -euo pipefail
[ $# -eq 5 ] || { sed -n 2,7p "$0"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
headers() {  # $1: revision or directory; $2: side
  if [ -d "$1/include/gradcomp" ]; then
    echo "$(cd "$1" && pwd)/include"
  else
    mkdir -p "$work/$2"
    git -C "$root" archive "$1" include | tar -x -C "$work/$2"
    echo "$work/$2/include"
  fi
}
inc_a=$(headers "$1" a)
inc_b=$(headers "$2" b)
cxx=${CXX:-g++}
# Each version is built into both positions of the binary (its namespace and entry point
# "a" or "b"), and two binaries run: A first then B, B first then A. Which position a codec
# sits in moved its decompress time by up to 30% on the 2-vCPU EPYC VM (code placement),
# whatever the code; the geometric mean of the two runs' ratios cancels that.
side() {  # $1: include dir, $2: position, $3: object
  "$cxx" -std=c++20 -O3 -DNDEBUG -Dgradcomp=gradcomp_ab_$2 -DAB_ENTRY=ab_run_$2 -I"$1" -c "$here/ab_cases.cpp" -o "$3"
}
side "$inc_a" a "$work/a1.o" &
side "$inc_b" b "$work/b2.o" &
wait
side "$inc_b" a "$work/b1.o" &
side "$inc_a" b "$work/a2.o" &
"$cxx" -std=c++20 -O2 -c "$here/ab_main.cpp" -o "$work/main.o"
wait
"$cxx" "$work/a1.o" "$work/b2.o" "$work/main.o" -o "$work/ab_first"
"$cxx" "$work/b1.o" "$work/a2.o" "$work/main.o" -o "$work/ba_first"
echo "A in the first position:"
"$work/ab_first" "$3" "$4" "$5" | tee "$work/first.txt"
echo "B in the first position (its B/A column is A/B):"
"$work/ba_first" "$3" "$4" "$5" | tee "$work/second.txt"
echo "B/A, geometric mean over both positions:"
paste -d'|' "$work/first.txt" "$work/second.txt" | awk -F'|' '{
  split($1, x, " "); split($3, y, " ");
  for (i = 1; i <= length(x); ++i) if (x[i] == "B/A") r1 = x[i + 1];
  for (i = 1; i <= length(y); ++i) if (y[i] == "B/A") r2 = y[i + 1];
  printf "%-18s %-13s B/A %.3f  (%.3f, %.3f)\n", x[1], x[2], sqrt(r1 / r2), r1, 1 / r2 }'
