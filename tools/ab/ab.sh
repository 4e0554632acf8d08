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
"$cxx" -std=c++20 -O3 -DNDEBUG -Dgradcomp=gradcomp_ab_a -DAB_ENTRY=ab_run_a -I"$inc_a" -c "$here/ab_cases.cpp" -o "$work/a.o" &
"$cxx" -std=c++20 -O3 -DNDEBUG -Dgradcomp=gradcomp_ab_b -DAB_ENTRY=ab_run_b -I"$inc_b" -c "$here/ab_cases.cpp" -o "$work/b.o" &
"$cxx" -std=c++20 -O2 -c "$here/ab_main.cpp" -o "$work/main.o" &
for job in $(jobs -p); do wait "$job"; done
"$cxx" "$work/a.o" "$work/b.o" "$work/main.o" -o "$work/ab"
"$work/ab" "$3" "$4" "$5"
