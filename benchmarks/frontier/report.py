"""Turns benchmarks/frontier/run.py's results into the table in docs/frontier.md (between the
frontier-table markers) and the plot docs/frontier.png.

A method's row is over its seeds: the mean held-out loss, the spread (max - min) and the gap of
the mean to fp32's mean. Bytes are per rank and step averaged over the whole run (ring figures:
the hook state's or LocalSteps' wire_bytes over the steps; PowerSGD's P and Q and its
uncompressed tensors as fp32 ring all-reduces, its dense first steps included; fp32 a ring
all-reduce of 4n). The PowerSGD curve is its four points joined in order of bytes, linear in
log(bytes); a row is "on" it when its mean loss is within the tolerance (fp32's seed spread) of
the curve at its bytes, "below" or "above" otherwise; left of r1's bytes a row compares with
r1's loss, right of r8's with r8's (and says so). The goals: within 1% of fp32's loss at 30x
or more fewer bytes, within 3% at 100x or more."""

import argparse
import json
import math
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOALS = ((1.0, 30), (3.0, 100))  # (gap to fp32 in % at most, fewer bytes than fp32 at least)


def load(path):
    """Runs in file order (a later line of the same label and seed replaces an earlier one)."""
    runs = {}
    with open(path) as f:
        for line in filter(str.strip, f):
            r = json.loads(line)
            runs[(r["label"], r["seed"])] = r
    return list(runs.values())


def kind(r):
    o = r.get("options", {})
    if r["spec"] == "torch:powersgd":
        return "PowerSGD"
    if r["spec"] in ("fp32", "bf16", "tagc"):
        return "all-reduce"
    if r["spec"] == "demo":  # gradcomp.optim.DeMo exchanges on the gather path
        return "gather"
    return o.get("path", "auto")


def group(runs):
    """One row per label: its runs' losses, mean, spread and mean bytes over the run."""
    rows = {}
    for r in runs:
        rows.setdefault(r["label"], []).append(r)
    out = []
    for label, rs in rows.items():
        ev = [r["eval"] for r in rs]
        mean = sum(ev) / len(ev)
        out.append({"label": label, "runs": rs, "kind": kind(rs[0]), "local": rs[0]["spec"] == "localsteps",
                    "H": rs[0]["options"].get("period") if rs[0]["spec"] == "localsteps" else None,
                    "seeds": sorted(r["seed"] for r in rs), "eval": mean, "spread": max(ev) - min(ev),
                    "bytes": sum(r["wire_mean"] for r in rs) / len(rs),
                    "replicas_differ": not all(r["replicas_equal"] for r in rs)})
    return out


def against(pts, b, loss, tol):
    """Verdict for a row at b bytes with that loss against the curve pts [(bytes, loss, rank)]."""
    if len(pts) < 2:
        return "-"
    if b <= pts[0][0]:
        ref, where = pts[0][1], f" (left of r{pts[0][2]})" if b < pts[0][0] else ""
    elif b >= pts[-1][0]:
        ref, where = pts[-1][1], f" (right of r{pts[-1][2]})" if b > pts[-1][0] else ""
    else:
        for (b0, l0, _), (b1, l1, _) in zip(pts, pts[1:]):
            if b0 <= b <= b1:
                t = (math.log(b) - math.log(b0)) / (math.log(b1) - math.log(b0))
                ref, where = l0 + t * (l1 - l0), ""
                break
    v = "on" if abs(loss - ref) <= tol else "below" if loss < ref else "above"
    return v + where


def analyse(runs):
    rows = group(runs)
    fp = next((row for row in rows if row["label"] == "fp32"), None)
    if fp is None:
        raise SystemExit("no fp32 run in the results: it is the reference of every row")
    tol = fp["spread"]
    curve = sorted((row["bytes"], row["eval"], row["runs"][0]["options"]["rank"]) for row in rows
                   if row["kind"] == "PowerSGD")
    for row in rows:
        row["gap"] = 100 * (row["eval"] - fp["eval"]) / fp["eval"]
        row["x"] = fp["bytes"] / row["bytes"]
        row["verdict"] = "-" if row["kind"] == "PowerSGD" else against(curve, row["bytes"], row["eval"], tol)
    goals = [[row["label"] for row in rows if row is not fp and row["gap"] <= gap and row["x"] >= x]
             for gap, x in GOALS]
    # The goals again against fp32 at another learning rate (a row "fp32 lr ..."), where one ran:
    # the methods' learning rates are their own, so the better of the references is the fair one
    others = []
    for ref in (row for row in rows if row["runs"][0]["spec"] == "fp32" and row is not fp):
        met = [[row["label"] for row in rows if row["x"] >= x and row["runs"][0]["spec"] != "fp32"
                and 100 * (row["eval"] - ref["eval"]) / ref["eval"] <= gap] for gap, x in GOALS]
        others.append((ref, met))
    return {"rows": rows, "fp32": fp, "tol": tol, "curve": curve, "goals": goals, "other_refs": others}


def fmt_bytes(b):
    return f"{b / 1e3:,.1f} kB" if b < 1e6 else f"{b / 1e6:.2f} MB"


def table(res):
    rows, fp = res["rows"], res["fp32"]
    any_r = fp["runs"][0]
    c, m = any_r["corpus"], any_r["model"]
    steps = sorted({r["steps"] for row in rows for r in row["runs"]})
    dates = sorted({r["date"] for row in rows for r in row["runs"]})
    psgd = next((row["runs"][0] for row in rows if row["kind"] == "PowerSGD"), None)
    tol_pct = 100 * res["tol"] / fp["eval"]
    lines = [f"{any_r['world']} ranks (gloo, one process and one thread per rank), host {any_r['host']} "
             f"({any_r.get('cores', '?')} cores), torch {any_r['torch']}, {' to '.join(dict.fromkeys([dates[0], dates[-1]]))}; "
             f"TinyTransformer vocabulary {m['vocab']} (bytes), d {m['d']}, {m['layers']} layers, {m['heads']} heads, "
             f"sequences of {m['seq']}, {any_r['n']:,} parameters; AdamW, batch {any_r['batch']} sequences per rank; "
             f"{', '.join(map(str, steps))} steps. Corpus: Debian's {c['package']} package, {c['source']}: "
             f"{len(c['train_files'])} files ({c['train_bytes']:,} bytes) for training, {c['held_out']} "
             f"({c['held_out_bytes']:,} bytes) held out (sha256 prefix {c['sha256_16']})."
             + (f" PowerSGD: start_powerSGD_iter {psgd['powersgd_start_iter']} (10% of the steps), error feedback and "
                "warm start on, min_compression_rate 2." if psgd else "")
             + (f" fp32's seed spread (seeds {', '.join(map(str, fp['seeds']))}): {res['tol']:.4f} ({tol_pct:.2f}%), "
                "the tolerance of \"on\"." if len(fp["seeds"]) > 1 else " fp32 ran for one seed: \"on\" has no tolerance.")
             + " Bytes: per rank and step averaged over the whole run.", "",
             f"fp32: held-out loss {fp['eval']:.4f}, {fmt_bytes(fp['bytes'])} per rank and step.", "",
             "| method | path | H | seeds | held-out loss (mean) | spread | gap to fp32 | bytes/rank/step (run mean) | "
             "fewer than fp32 | against PowerSGD's curve |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        notes = ["replicas differ at the end"] if row["replicas_differ"] else []
        label = row["label"] + (f" ({'; '.join(notes)})" if notes else "")
        spread = (f"{row['spread']:.4f} ({100 * row['spread'] / row['eval']:.2f}%)" if len(row["seeds"]) > 1
                  else "one seed")
        lines.append(f"| {label} | {row['kind']} | {row['H'] or '-'} | {','.join(map(str, row['seeds']))} | "
                     f"{row['eval']:.4f} | {spread} | {row['gap']:+.2f}% | {fmt_bytes(row['bytes'])} | {row['x']:.1f}x | "
                     f"{row['verdict']} |")
    lines.append("")
    for (gap, x), met in zip(GOALS, res["goals"]):
        lines.append(f"Within {gap:g}% of fp32 at >= {x}x fewer bytes: {', '.join(met) if met else 'no row'}.")
        lines.append("")
    for ref, goals in res["other_refs"]:
        for (gap, x), met in zip(GOALS, goals):
            lines.append(f"Within {gap:g}% of {ref['label']} (held-out loss {ref['eval']:.4f}) at >= {x}x fewer bytes: "
                         f"{', '.join(met) if met else 'no row'}.")
            lines.append("")
    lines.append("![held-out loss against bytes per rank and step](frontier.png)")
    return "\n".join(lines) + "\n"


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fp = res["fp32"]
    fig, ax = plt.subplots(figsize=(10, 7))
    pts = res["curve"]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color="black", lw=1.5, marker="^", ms=8,
            label="PowerSGD r1-r8 (peer curve)")
    for b, l, rr in pts:
        ax.annotate(f"r{rr}", (b, l), textcoords="offset points", xytext=(4, 4), fontsize=7)
    for k, ls in ((0, "--"), (1, ":"), (3, ":")):
        ax.axhline(fp["eval"] * (1 + k / 100), color="grey", lw=0.8, ls=ls)
    for x in (30, 100):
        ax.axvline(fp["bytes"] / x, color="grey", lw=0.8, ls=":")
    palette, colors = plt.cm.tab10.colors, {}
    for row in res["rows"]:
        if row["kind"] == "PowerSGD":
            continue
        codec = re.sub(r"^(local|streaming) | H=\d+| sharded| \d+ fragments", "", row["label"])
        col = colors.setdefault(codec, palette[len(colors) % len(palette)])
        marker = "*" if row["local"] else "D" if row["kind"] == "all-reduce" else "s"
        evals = [r["eval"] for r in row["runs"]]
        ax.errorbar(row["bytes"], row["eval"], yerr=[[row["eval"] - min(evals)], [max(evals) - row["eval"]]],
                    fmt=marker, ms=12 if row["local"] else 7, color=col, mfc=col if row["local"] else "none",
                    capsize=2, zorder=3)
        ax.annotate(row["label"].replace("+EF", "").replace(" sharded", ""), (row["bytes"], row["eval"]),
                    textcoords="offset points", xytext=(5, -9), fontsize=6, color=col)
    ax.plot([], [], "*", color="grey", ms=12, label="local steps (H = steps between syncs)")
    ax.plot([], [], "s", color="grey", mfc="none", label="per step, sharded path")
    ax.plot([], [], "D", color="grey", mfc="none", label="per step, all-reduce")
    ax.set_xscale("log")
    ax.set_xlabel("bytes per rank per step, averaged over the whole run (ring figures)")
    ax.set_ylabel("held-out loss (nats per byte), mean over seeds; bars: min to max")
    ax.set_title(f"Held-out loss against bytes, {fp['runs'][0]['world']} ranks, AdamW\n(dashed: fp32; dotted: "
                 "fp32 + 1% and + 3%, and fp32's bytes / 30 and / 100)", fontsize=9)
    top = min(max(row["eval"] for row in res["rows"]), fp["eval"] * 1.4)
    ax.set_ylim(fp["eval"] * 0.98, top * 1.02)
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?", default=os.path.join(ROOT, "build", "frontier", "results.jsonl"))
    ap.add_argument("--no-doc", action="store_true", help="print the table only")
    a = ap.parse_args()
    runs = load(a.results)
    ok = [r for r in runs if "eval" in r and math.isfinite(r["eval"])]
    bad = sorted({f"{r['label']} seed {r['seed']}" for r in runs if r not in ok})
    if bad:
        print("failed or diverged (left out):", ", ".join(bad))
    res = analyse(ok)
    md = table(res)
    print(md)
    if a.no_doc:
        return
    doc = os.path.join(ROOT, "docs", "frontier.md")
    with open(doc) as f:
        text = f.read()
    new, n = re.subn(r"(<!-- frontier-table:begin[^\n]*-->\n).*?(<!-- frontier-table:end -->)",
                     lambda m: m.group(1) + md + m.group(2), text, flags=re.S)
    if not n:
        raise SystemExit("docs/frontier.md has no frontier-table markers")
    with open(doc, "w") as f:
        f.write(new)
    plot(res, os.path.join(ROOT, "docs", "frontier.png"))


if __name__ == "__main__":
    main()
