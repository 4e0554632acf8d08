"""Turns benchmarks/e2e/run.py's results into a table in docs/python.md and a plot in docs/:
2 ranks between the e2e-table markers and docs/e2e-bandwidth.png; W ranks (another W) between
the e2e-table-W markers and docs/e2e-bandwidth-W.png; with --tag T, the e2e-table-T markers and
docs/e2e-bandwidth-T.png.

Target loss: the 10-step mean loss fp32 reaches at 1/4 of the curve; steps to target: the
first step at which a method's 10-step mean is at or below it. Time to target: steps to target
x median step time at that rate (local steps: the mean, since only every H-th step syncs). The alpha-beta model (the fallback where namespaces were
unavailable, and the compress-or-not check where they were) predicts a step as its loopback
time without a limit plus the bytes its rank sends per step at the link rate."""

import argparse
import json
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RATE_BITS = {"100mbit": 100e6, "1gbit": 1e9, "10gbit": 10e9}  # "unlimited": the model's base


def mean10(xs):
    return [sum(xs[max(0, i - 9):i + 1]) / len(xs[max(0, i - 9):i + 1]) for i in range(len(xs))]


def median_step(times, skip=12):  # PowerSGD starts at step 10
    d = [b - a for a, b in zip(times, times[1:])][skip:]
    return sorted(d)[len(d) // 2]


def step_time(times, spec, skip=12):
    """A method's time per step: the median, or for local steps (whose sync steps are the slow
    ones) the mean over the timed steps."""
    if spec.startswith("localsteps:"):
        return (times[-1] - times[skip]) / (len(times) - 1 - skip)
    return median_step(times, skip)


def bytes_per_step(tx, skip=12):
    return (tx[-1] - tx[skip]) / (len(tx) - 1 - skip)


def analyse(res):
    m = res["methods"]
    base = mean10(m["fp32 (DDP all-reduce)"]["losses"])
    target = base[int(0.25 * len(base)) - 1]
    rows = []
    for label, r in m.items():
        sm = mean10(r["losses"])
        steps = next((i + 1 for i, v in enumerate(sm) if v <= target), None)
        row = {"label": label, "eval": r["eval"], "steps": steps, "loop_ms": 1e3 * step_time(r["loopback_step_times"], r["spec"]),
               "rates": {}}
        sent = None
        for rate, rr in res["rates"].items():
            if label in rr:
                runs = rr[label] if isinstance(rr[label], list) else [rr[label]]
                best = min(runs, key=lambda x: step_time(x["step_times"], r["spec"]))  # the least disturbed repeat
                ms = 1e3 * step_time(best["step_times"], r["spec"])
                if rate == "unlimited":
                    row["loop_ms"] = ms  # the same namespaces without a limit
                    continue
                sent = bytes_per_step(best["tx_bytes"])
                row["rates"][rate] = {"ms": ms, "measured": True}
        row["bytes"] = sent
        rows.append(row)
    for row in rows:  # alpha-beta: unlimited (else loopback) step + bytes at the link rate
        for rate, bits in RATE_BITS.items():
            model = row["loop_ms"] + (1e3 * 8 * row["bytes"] / bits if row["bytes"] else 0.0)
            row["rates"].setdefault(rate, {"ms": model, "measured": False})["model_ms"] = model
    return target, rows


def noise(res):
    """Per rate: the spread of a method's repeats, (slowest - fastest) / fastest median step time,
    as the median and the largest over methods."""
    out = {}
    for rate, rr in res["rates"].items():
        spreads = []
        for runs in rr.values():
            ms = [median_step(x["step_times"]) for x in (runs if isinstance(runs, list) else [runs])]
            if len(ms) > 1:
                spreads.append((max(ms) - min(ms)) / min(ms))
        if spreads:
            spreads.sort()
            out[rate] = (spreads[len(spreads) // 2], spreads[-1], len(rr[next(iter(rr))]))
    return out


def table(res, target, rows):
    rates = [r for r in RATE_BITS if any(r in row["rates"] for row in rows)]
    how = "measured in network namespaces" if res["rates"] else f"alpha-beta model ({res['netns']})"
    out = [f"{res['world']} ranks, {res['cpus']} CPU cores ({res['host']}), model "
           f"{next(iter(res['methods'].values()))['params']:,} parameters; step times {how}; target loss "
           f"{target:.3f} (fp32's 10-step mean at 1/4 of the curve).", "",
           "| method | bytes/step/rank | steps to target | held-out loss | " +
           " | ".join(f"{r} ms/step (model) | {r} time to target" for r in rates) + " |",
           "|---|---:|---:|---:|" + "---:|---:|" * len(rates)]
    for row in rows:
        cells = [row["label"], f"{row['bytes'] / 1e3:,.0f} kB" if row["bytes"] else "n/a",
                 str(row["steps"]) if row["steps"] else "not reached", f"{row['eval']:.3f}"]
        for r in rates:
            x = row["rates"][r]
            tt = f"{row['steps'] * x['ms'] / 1e3:.1f} s" if row["steps"] else "-"
            ms = f"{x['ms']:.0f} ({x['model_ms']:.0f})" if x["measured"] else f"model {x['model_ms']:.0f}"
            cells += [ms, tt]
        out.append("| " + " | ".join(cells) + " |")
    spread = noise(res)
    if spread:
        out += ["", "Repeat-to-repeat spread of the median step time ((slowest - fastest) / fastest over "
                f"{next(iter(spread.values()))[2]} interleaved repeats; the table keeps the fastest): " +
                ", ".join(f"{r} median {m:.0%}, worst {w:.0%}" for r, (m, w, _) in spread.items()) + "."]
    return "\n".join(out)


def plot(rows, world, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [r for r in RATE_BITS if r in rows[0]["rates"]]
    if any(rows[0]["rates"][r]["measured"] for r in rates):  # plot measured rates only
        rates = [r for r in rates if rows[0]["rates"][r]["measured"]]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    w = 0.8 / len(rows)
    colors = plt.cm.tab20.colors  # 20 distinct colours: one per method
    for i, row in enumerate(rows):
        ys = [row["steps"] * row["rates"][r]["ms"] / 1e3 if row["steps"] else 0 for r in rates]
        ax.bar([j + i * w for j in range(len(rates))], ys, w, label=row["label"], color=colors[i % len(colors)],
               hatch="//" if "FSDP" in row["label"] else None)
    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(rates))], rates)
    ax.set_ylabel("time to target loss (s)")
    ax.set_yscale("log")
    kinds = "; DDP, FSDP2 hatched" if any("FSDP" in row["label"] for row in rows) else ""
    ax.set_title(f"Training time to target under a limited link ({world} ranks, gloo{kinds})")
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?", default=os.path.join(ROOT, "build", "e2e", "results.json"))
    ap.add_argument("--tag", default=None, help="the table's marker suffix and the plot's (default: the world size, none at 2)")
    a = ap.parse_args()
    with open(a.results) as f:
        res = json.load(f)
    target, rows = analyse(res)
    md = table(res, target, rows)
    print(md)
    doc = os.path.join(ROOT, "docs", "python.md")
    with open(doc) as f:
        text = f.read()
    tag = f"-{a.tag}" if a.tag else "" if res["world"] == 2 else f"-{res['world']}"
    marks = (f"<!-- e2e-table{tag}:begin -->\n", f"<!-- e2e-table{tag}:end -->")
    if marks[0] not in text:
        raise SystemExit(f"docs/python.md has no {marks[0].strip()} ... {marks[1]} markers")
    new = re.sub("(" + re.escape(marks[0]) + ").*?(" + re.escape(marks[1]) + ")",
                 lambda m: m.group(1) + md + "\n" + m.group(2), text, flags=re.S)
    with open(doc, "w") as f:
        f.write(new)
    plot(rows, res["world"], os.path.join(ROOT, "docs", f"e2e-bandwidth{tag}.png"))


if __name__ == "__main__":
    main()
