#!/usr/bin/env python3
"""The CUDA section of docs/benchmarks.md from a GPU check's summary.json.

    benchmarks/gpu_check.sh OUT                       # on the GPU machine
    cp OUT/summary.json benchmarks/results/gpu-check-<device>.json
    benchmarks/gpu_table.py benchmarks/results/gpu-check-<device>.json

Replaces the section between the GPU markers of docs/benchmarks.md (appends it the first time);
benchmarks/report keeps that section when it rewrites the file. Every figure and verdict is
computed here from the JSON. Python 3 standard library only.
"""

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- gpu-check: begin -->", "<!-- gpu-check: end -->"
GOALS = [  # (benchmark, counter, comparison, bound, what)
    ("BM_compress_bf16/134217728/manual_time", "ratio", ">=", 0.85, "bf16 compress at 2^27 floats, x device copy"),
    ("BM_accumulate_bf16/134217728/manual_time", "ratio", ">=", 0.85, "bf16 accumulate at 2^27 floats, x device copy"),
    ("BM_topk/n:134217728/permille:10/manual_time", "vs_2reads", "<=", 3.0, "exact top-k 1% of 2^27, time / two reads"),
]


def g(v, spec=".3g"):
    return format(v, spec) if isinstance(v, (int, float)) else ""


def steps(data):
    """The check's steps and their outcomes ("tests: ok, 16 s")."""
    return [re.sub(r", log: .*", "", x) for x in data["steps"] if re.match(r"^[a-z_]+: (ok|FAILED)", x)]


def section(data, source):
    cb, pb = data["cuda_bench"], data["python_bench"]
    ctx = cb["context"]
    rows = {r["name"]: r for r in cb["benchmarks"] if r.get("run_type", "iteration") == "iteration"}
    out = [BEGIN, "## CUDA (`benchmarks/gpu_check.sh`)", "",
           f"Device: {ctx.get('device', '?')} (sm_{ctx.get('compute_capability', '?')}, L2 "
           f"{int(ctx.get('l2_bytes', 0)) >> 20} MiB), run {ctx['date'][:10]}; results: `{source}`. "
           f"The check {'passed' if data['pass'] else 'FAILED'}: " + "; ".join(steps(data)) + ".", "",
           "GBps: bytes an operation must read and write per second; x copy: over a device-to-device "
           "`cudaMemcpy` of the same bytes in the same run.", "",
           "| benchmark | us | GBps | copy GBps | x copy | compression | time / two reads |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows.items():
        if name.startswith("BM_tagc"):
            continue
        out.append(f"| {name.replace('/manual_time', '')} | {g(r.get('us'))} | {g(r.get('GBps'))} | {g(r.get('copy_GBps'))} | "
                   f"{g(r.get('ratio'), '.3f')} | {g(r.get('compression'))} | {g(r.get('vs_2reads'), '.2f')} |")
    out += ["", "TAGC, one rank of W = 4 (phase 0: encode_bitmap; 1: receive_bitmap + encode_sketch; 2: receive_sketch):", "",
            "| benchmark | us | x a copy of 4n bytes | peeled | rounds |", "|---|---:|---:|---:|---:|"]
    for name, r in rows.items():
        if name.startswith("BM_tagc"):
            out.append(f"| {name.replace('/manual_time', '')} | {g(r.get('us'))} | {g(r.get('x_copy'))} | "
                       f"{g(r.get('peeled'), '.0f')} | {g(r.get('rounds'), '.0f')} |")
    if pb:
        out += ["", f"From Python (`benchmarks/gpu_python.py`, torch {pb['info']['torch']}, registry defaults):", "",
                "| codec | n | compress us | x copy | accumulate us | x copy | compression | torch.topk us | / torch.topk |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in pb["rows"]:
            out.append(f"| {r['codec']} | 2^{r['n'].bit_length() - 1} | {r['compress_us']:.0f} | {r['compress_ratio']:.2f} | "
                       f"{r['accumulate_us']:.0f} | {r['accumulate_ratio']:.2f} | {r['compression']:.1f} | "
                       f"{g(r.get('torch_topk_us'), '.0f')} | {g(r.get('vs_torch_topk'), '.2f')} |")
        if pb.get("phase_rows"):
            out += ["", "Phase codecs from Python, one whole step on one rank (collectives left out):", "",
                    "| codec | n | step us | copies of 4n bytes | bytes sent | device bytes |", "|---|---:|---:|---:|---:|---:|"]
            for r in pb["phase_rows"]:
                out.append(f"| {r['codec']} | 2^{r['n'].bit_length() - 1} | {r['step_us']:.0f} | {r['copies']:.1f} | "
                           f"{r['sent_bytes']} | {r['device_bytes']} |")
    out += ["", "Goals:", ""]
    for name, key, op, bound, what in GOALS:
        v = rows.get(name, {}).get(key)
        if v is None:
            out.append(f"- {what} {op} {bound}: not measured")
        else:
            met = v >= bound if op == ">=" else v <= bound
            out.append(f"- {what} {op} {bound}: {v:.2f}, {'met' if met else 'not met'}")
    return out + ["", END]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", type=Path)
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    a = ap.parse_args()
    data = json.loads(a.result.read_text())
    source = a.result.resolve().relative_to(ROOT) if a.result.resolve().is_relative_to(ROOT) else a.result
    text = a.doc.read_text()
    new = "\n".join(section(data, source))
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + new + text[text.index(END) + len(END):]
    else:
        text = text.rstrip() + "\n\n" + new + "\n"
    a.doc.write_text(text)
    print(f"wrote the CUDA section of {a.doc}")


if __name__ == "__main__":
    main()
