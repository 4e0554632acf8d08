#!/usr/bin/env python3
"""Line coverage from llvm-cov lcov exports: each run's, and all runs' together.

Usage: coverage_lines.py FOLDER ROOT NAME...

Reads FOLDER/<NAME>.lcov for each NAME; writes FOLDER/<NAME>.lines (one line: "P% (hit / lines)"),
FOLDER/all.lines (the same for all runs together: a line counts once, covered if any run ran it)
and FOLDER/report.txt (per source file, all runs together). Source paths are shown relative to
ROOT. Used by campaign.sh (the libFuzzer targets) and python_coverage.sh (the Python harness).
"""

import sys


def lines(path: str, root: str) -> dict:
    got, src = {}, None
    for rec in open(path):
        if rec.startswith("SF:"):
            src = rec[3:].strip().removeprefix(root)
        elif rec.startswith("DA:"):
            line, count = rec[3:].split(",")[:2]
            key = (src, int(line))
            got[key] = got.get(key, False) or int(count) > 0
    return got


def share(got: dict) -> str:
    hit = sum(got.values())
    return "%.1f%% (%d / %d)" % (100.0 * hit / max(1, len(got)), hit, len(got))


def main() -> None:
    folder, root, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    union: dict = {}
    for name in names:
        got = lines(f"{folder}/{name}.lcov", root)
        open(f"{folder}/{name}.lines", "w").write(share(got) + "\n")
        for key, hit in got.items():
            union[key] = union.get(key, False) or hit
    open(f"{folder}/all.lines", "w").write(share(union) + "\n")
    with open(f"{folder}/report.txt", "w") as out:
        out.write("Line coverage, all runs together\n\n")
        out.write("%-60s %7s %7s %7s\n" % ("source", "lines", "covered", "cover"))
        for src in sorted({s for s, _ in union}):
            mine = [hit for (s, _), hit in union.items() if s == src]
            out.write("%-60s %7d %7d %6.1f%%\n" % (src, len(mine), sum(mine), 100.0 * sum(mine) / len(mine)))
        total = sum(union.values())
        out.write("%-60s %7d %7d %6.1f%%\n" % ("TOTAL", len(union), total, 100.0 * total / max(1, len(union))))


if __name__ == "__main__":
    main()
