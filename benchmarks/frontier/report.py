"""Turns benchmarks/frontier/run.py's results into the table in docs/sharded.md (between the
frontier-table markers) and the plot docs/sharded-frontier.png.

Bytes are per rank and step on the compressed steps (ring figures: the hook state's
wire_bytes; PowerSGD's P and Q and its uncompressed tensors as fp32 ring all-reduces; fp32 a
ring all-reduce of 4n); the mean column adds the dense warm-up steps. The PowerSGD curve is
AdamW's four PowerSGD points joined in order of bytes, linear in log(bytes); a point is "on"
it when its loss is within the tolerance (the spread of fp32's held-out loss over the seeds
run) of the curve at its bytes, "below" or "above" otherwise; left of r1's bytes a point
compares with r1's loss, right of r8's with r8's (and says so)."""

import argparse
import json
import math
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows[r["label"]] = r
    return rows


def curve(rows, opt):
    pts = sorted((r["wire_per_step"], r["eval"], r["options"]["rank"]) for r in rows.values()
                 if r.get("optimizer") == opt and r.get("spec") == "torch:powersgd" and "eval" in r)
    return pts


def against(pts, b, loss, tol):
    """(verdict, the curve's loss at b) for a point at b bytes with that loss."""
    if len(pts) < 2:
        return "-", None
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
    if abs(loss - ref) <= tol:
        v = "on"
    else:
        v = "below" if loss < ref else "above"
    return v + where, ref


def kind(r):
    o = r.get("options", {})
    if r["spec"] == "torch:powersgd":
        return "PowerSGD"
    if r["spec"] in ("fp32", "bf16", "tagc"):
        return "all-reduce"
    return o.get("path", "auto")


def analyse(rows):
    out = {}
    for opt in ("adamw", "sgd"):
        ref = rows.get(f"{opt} fp32")
        if not ref:
            continue
        seeds = [r["eval"] for r in rows.values() if r.get("optimizer") == opt and r.get("spec") == "fp32"]
        tol = max(seeds) - min(seeds) if len(seeds) > 1 else 0.0
        out[opt] = {"fp32": ref, "seeds": seeds, "tol": tol, "curve": curve(rows, opt), "rows": []}
    # SGD has two PowerSGD points only; both optimizers are judged against their own curve, with
    # AdamW's seed spread as the tolerance.
    tol = out["adamw"]["tol"] if "adamw" in out else 0.0
    for r in rows.values():
        opt = r.get("optimizer")
        if opt not in out or "eval" not in r or r.get("seed", 0) != 0:
            continue
        g = out[opt]
        fp = g["fp32"]
        row = {"label": r["label"][len(opt) + 1:], "r": r, "kind": kind(r), "eval": r["eval"],
               "gap": 100 * (r["eval"] - fp["eval"]) / fp["eval"], "bytes": r["wire_per_step"], "mean": r["wire_mean"],
               "x": fp["wire_per_step"] / r["wire_per_step"]}
        row["verdict"], row["ref"] = ("-", None) if r["spec"] == "torch:powersgd" else against(g["curve"], row["bytes"],
                                                                                               row["eval"], tol)
        g["rows"].append(row)
    return out


def fmt_bytes(b):
    return f"{b / 1e3:,.1f} kB" if b < 1e6 else f"{b / 1e6:.2f} MB"


def table(rows, res):
    any_r = next(iter(rows.values()))
    c = any_r["corpus"]
    m = any_r["model"]
    a = res["adamw"]
    psgd = next(r for r in rows.values() if r["spec"] == "torch:powersgd")
    lines = [f"{any_r['world']} ranks (gloo, one process and one thread per rank), host {any_r['host']} "
             f"({os.cpu_count()} cores), torch {any_r['torch']}, {any_r['date']}; TinyTransformer vocabulary {m['vocab']} "
             f"(bytes), d {m['d']}, {m['layers']} layers, {m['heads']} heads, sequences of {m['seq']}, {any_r['n']:,} "
             f"parameters; batch {any_r['batch']} sequences per rank; {any_r['steps']} steps. Corpus: the "
             f"{len(c['train_files'])} other distinct files of /usr/share/common-licenses ({c['train_bytes']:,} bytes) "
             f"for training, {c['held_out']} ({c['held_out_bytes']:,} bytes) held out (sha256 prefix {c['sha256_16']}). "
             f"PowerSGD: start_powerSGD_iter {psgd['powersgd_start_iter']} (10% of the steps), error feedback and warm "
             f"start on, min_compression_rate 2. fp32 seed-to-seed spread of the held-out loss (AdamW, seeds "
             f"0, 1, 2): {a['tol']:.4f} ({100 * a['tol'] / a['fp32']['eval']:.2f}%), the tolerance of \"on\".", ""]
    for opt, title in (("adamw", "AdamW"), ("sgd", "SGD with momentum 0.9")):
        if opt not in res:
            continue
        g = res[opt]
        lines += [f"**{title}** (fp32: held-out loss {g['fp32']['eval']:.4f}, {fmt_bytes(g['fp32']['wire_per_step'])} "
                  "per rank and step).", "",
                  "| method | path | held-out loss | gap to fp32 | bytes/rank/step | fewer than fp32 | mean over the run | "
                  "against PowerSGD's curve |", "|---|---|---:|---:|---:|---:|---:|---|"]
        for row in g["rows"]:
            if row["label"].startswith("fp32 seed"):
                continue
            lines.append(f"| {row['label']} | {row['kind']} | {row['eval']:.4f} | {row['gap']:+.2f}% | "
                         f"{fmt_bytes(row['bytes'])} | {row['x']:.1f}x | {fmt_bytes(row['mean'])} | {row['verdict']} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


COLORS = {}


def plot(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    opts = [o for o in ("adamw", "sgd") if o in res]
    fig, axes = plt.subplots(1, len(opts), figsize=(8 * len(opts), 6.5), squeeze=False)
    palette = plt.cm.tab20.colors
    for ax, opt in zip(axes[0], opts):
        g = res[opt]
        fp = g["fp32"]
        pts = g["curve"]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", color="black", lw=1.5, marker="^", ms=8,
                label="PowerSGD r1-r8 (peer curve)")
        for b, l, rr in pts:
            ax.annotate(f"r{rr}", (b, l), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.axhline(fp["eval"], color="grey", lw=0.8, ls="--")
        ax.axhline(fp["eval"] * 1.01, color="grey", lw=0.8, ls=":")
        ax.axvline(fp["wire_per_step"] / 30, color="grey", lw=0.8, ls=":")
        ax.text(fp["wire_per_step"] / 30, ax.get_ylim()[0], " fp32 / 30", fontsize=7, color="grey", va="bottom")
        for row in g["rows"]:
            if row["kind"] == "PowerSGD" or row["label"].startswith("fp32 seed"):
                continue
            base = re.sub(r" (gather|sharded).*", "", row["label"])
            if base not in COLORS:
                COLORS[base] = palette[len(COLORS) % len(palette)]
            col = COLORS[base]
            variant = "+" in row["label"].split("EF", 1)[-1]
            marker = {"gather": "o", "sharded": "s"}.get(row["kind"], "D")
            ax.scatter(row["bytes"], row["eval"], marker=marker, s=55 if not variant else 80,
                       facecolors="none" if row["kind"] == "gather" else col, edgecolors=col, linewidths=1.5,
                       zorder=3, label=base if not any(h.get_label() == base for h in ax.collections) else None)
            short = row["label"].replace("+EF", "").replace(" gather", " g").replace(" sharded", " s")
            ax.annotate(short, (row["bytes"], row["eval"]), textcoords="offset points", xytext=(4, -8), fontsize=6,
                        color=col)
        ax.set_xscale("log")
        ax.set_xlabel("bytes per rank per step (compressed steps, ring figures)")
        ax.set_ylabel("held-out loss (nats per byte)")
        ax.set_title(f"{'AdamW' if opt == 'adamw' else 'SGD, momentum 0.9'}: held-out loss against bytes, "
                     f"{fp['world']} ranks\n(hollow circles: gather path; filled squares: sharded; diamonds: "
                     "all-reduce; dashed: fp32, dotted: fp32 + 1%)", fontsize=9)
        top = min(max(r["eval"] for r in g["rows"]), fp["eval"] * 1.6)
        ax.set_ylim(fp["eval"] * 0.97, top * 1.02)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?", default=os.path.join(ROOT, "build", "frontier", "results.jsonl"))
    ap.add_argument("--no-doc", action="store_true", help="print the table only")
    a = ap.parse_args()
    rows = load(a.results)
    failed = [k for k, r in rows.items() if "failed" in r]
    if failed:
        print("failed:", ", ".join(failed))
    rows = {k: r for k, r in rows.items() if "eval" in r}
    res = analyse(rows)
    md = table(rows, res)
    print(md)
    if a.no_doc:
        return
    doc = os.path.join(ROOT, "docs", "sharded.md")
    with open(doc) as f:
        text = f.read()
    new, n = re.subn(r"(<!-- frontier-table:begin[^\n]*-->\n).*?(<!-- frontier-table:end -->)",
                     lambda m: m.group(1) + md + m.group(2), text, flags=re.S)
    if not n:
        raise SystemExit("docs/sharded.md has no frontier-table markers")
    with open(doc, "w") as f:
        f.write(new)
    plot(res, os.path.join(ROOT, "docs", "sharded-frontier.png"))


if __name__ == "__main__":
    main()
