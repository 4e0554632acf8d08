"""The tensor-parallel benchmark's table and plot from run.py's results:
the table between the markers in docs/model.md, the plot docs/tp-bandwidth.png.

    .venv/bin/python benchmarks/tp/report.py [results.json]
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
DOC = os.path.join(ROOT, "docs", "model.md")
BEGIN, END = "<!-- tp-table begin -->", "<!-- tp-table end -->"
WARMUP = 4  # timed steps left out (allocations, slot sizes, first plans)


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def steps_to(losses, target):
    for i in range(9, len(losses)):
        if sum(losses[i - 9:i + 1]) / 10 <= target:
            return i + 1
    return None


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "tp", "results.json")
    with open(path) as f:
        res = json.load(f)
    curves, rates = res["curves"], res["rates"]
    base = curves["fp32 all-reduce"]["losses"]
    target = sum(base[len(base) * 2 // 3 - 10:len(base) * 2 // 3]) / 10  # fp32's loss at 2/3 of the run
    labels = list(curves)
    step = {rate: {lab: min(median(r["step_seconds"][WARMUP:]) for r in runs) for lab, runs in by.items()}
            for rate, by in rates.items()}
    rate_names = list(rates)
    lines = [f"Host: {res['host']} ({res['cpus']} CPUs), {res['world']} ranks, one thread each, gloo; "
             f"target loss {target:.3f} (fp32's 10-step mean at step {len(base) * 2 // 3} of {len(base)}).", "",
             "| exchange | bytes per rank and step | held-out loss | steps to target | " +
             " | ".join(f"step at {r}" for r in rate_names) + " | " +
             " | ".join(f"time to target at {r}" for r in rate_names) + " |",
             "|---|---|---|---|" + "---|" * (2 * len(rate_names))]
    ttt = {}
    for lab in labels:
        c = curves[lab]
        n = steps_to(c["losses"], target)
        cells = [lab, f"{c['bytes_per_step'] / 1e3:,.0f} kB", f"{c['eval']:.3f}", str(n) if n else "not reached"]
        cells += [f"{step[r][lab] * 1e3:.0f} ms" for r in rate_names]
        for r in rate_names:
            ttt[(lab, r)] = n * step[r][lab] if n else None
            cells.append(f"{ttt[(lab, r)]:.1f} s" if n else "—")
        lines.append("| " + " | ".join(cells) + " |")
    planned = "AccTFM + planned pipeline"
    lines += ["", "Speed-up of AccTFM over the best uncompressed exchange (fp32 or bf16) at each rate, per step "
              "and to the target loss, and the planner's predicted gain of chunking (the 8 exchanged tensors "
              "together) beside the measured one (AccTFM's step minus the planned pipeline's):", "",
              "| rate | AccTFM: step | to target | planned pipeline: step | to target | chunks per layer | "
              "predicted gain of chunking | measured gain of chunking |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rate_names:
        best = min(step[r]["fp32 all-reduce"], step[r]["bf16 all-reduce"])
        best_t = min(t for t in (ttt[("fp32 all-reduce", r)], ttt[("bf16 all-reduce", r)]) if t is not None)
        plans = min(rates[r][planned], key=lambda x: median(x["step_seconds"][WARMUP:]))["plans"]
        predicted = sum(p["unchunked_s"] - p["predicted_s"] for p in plans)
        measured = step[r]["AccTFM"] - step[r][planned]
        cells = [r]
        for lab in ("AccTFM", planned):
            t = ttt[(lab, r)]
            cells += [f"{best / step[r][lab]:.2f}x", f"{best_t / t:.2f}x" if t else "—"]
        cells += [", ".join(str(len(p["chunks"])) for p in plans), f"{predicted * 1e3:.1f} ms", f"{measured * 1e3:.1f} ms"]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    with open(DOC) as f:
        doc = f.read()
    a, b = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    with open(DOC, "w") as f:
        f.write(doc[:a] + "\n" + table + "\n" + doc[b:])
    print(table)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    x = [float(r.replace("gbit", "e9").replace("mbit", "e6")) / 1e9 for r in rate_names]
    for lab in labels:
        ax[0].plot(x, [step[r][lab] * 1e3 for r in rate_names], marker="o", label=lab)
        ax[1].plot(range(1, len(curves[lab]["losses"]) + 1), curves[lab]["losses"], label=lab, lw=0.8)
    ax[0].set(xscale="log", yscale="log", xlabel="link (Gbit/s)", ylabel="step time (ms)",
              title=f"tensor parallelism, {res['world']} ranks")
    ax[1].axhline(target, color="gray", lw=0.5, ls="--")
    ax[1].set(xlabel="step", ylabel="training loss", title="loss per step (loopback)")
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "tp-bandwidth.png"), dpi=110)


if __name__ == "__main__":
    main()
