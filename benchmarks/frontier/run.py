"""Loss against bytes: held-out loss of a small GPT on English text against the bytes each rank
sends per step averaged over the whole run, for per-step gradient exchanges (DDP hooks), local
steps (gradcomp.localsteps.LocalSteps), 1-bit / 0-1 Adam and DeMo (gradcomp.optim), at 4 ranks (gloo on CPU, one process and one
thread per rank). docs/frontier.md describes the methods, the corpus and the goals.

    ~/.cache/gradcomp-ci/venv/bin/python benchmarks/frontier/run.py --steps 1000   # about 75 minutes on 2 idle cores (46 runs)
    ~/.cache/gradcomp-ci/venv/bin/python benchmarks/frontier/report.py            # table -> docs/frontier.md, plot -> docs/frontier.png

The corpus is Debian's fortunes package (apt-get install -y --no-install-recommends fortunes).
Results go to build/frontier/results.jsonl, one line per run (a method and a seed) as soon as it
is done; a second run skips the runs already there (delete the file, or pass --fresh, to start
over).

    --steps N          inner steps of every run (1000)
    --seeds 0,1,2      these seeds for every method (default: each method's own list)
    --only A,B         these labels only (run.py --list prints them with their seeds)
    --time-one         train the first selected method (fp32 unless --only) once, seed 0, into a
                       scratch file; print the wall and CPU seconds

Run time: a run of 1,000 steps takes 155 to 175 CPU seconds over its 4 ranks (--time-one: fp32
156, local fp32 H=10 174, local int8 H=10 157; on 2 cores at load 15, where the wall time was
350 to 415 s), so about 80 to 90 s on 2 idle cores plus start-up and the held-out evaluations
rank 0 does alone; the 46 runs of the list take about 75 minutes.

rank.py has the corpus, the model and the training loop.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from rank import corpus

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def methods():
    """Every method with its seeds: three for fp32 (its spread is the tolerance) and for the
    local-steps rows that may meet the goals, one for the rest (docs/frontier.md). In the order
    they run: the rows the goals rest on first."""
    out = []
    three = [0, 1, 2]

    def add(label, spec, options=None, seeds=(0,)):
        out.append({"label": label, "optimizer": "adamw", "spec": spec, "options": options or {}, "seeds": list(seeds)})

    # Local steps (no DDP: a full replica per rank, pseudo-gradients exchanged every H steps)
    def local(label, codec, path, period, seeds=(0,), **options):
        add(f"{label} H={period}", "localsteps", {"codec": codec, "path": path, "period": period, **options}, seeds)

    nesterov = {"outer_lr": 0.7, "outer_momentum": 0.9, "nesterov": True}
    average = {"outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
    add("fp32", "fp32", seeds=three)
    local("local int4+EF", "int4", "sharded", 5, (0,), error_feedback=True, **average)
    local("local int4+EF", "int4", "sharded", 10, (0,), error_feedback=True, **average)
    # Averaging AdamW steps of W replicas shortens the step (their noise cancels): a larger outer
    # step or a little outer momentum gives it back
    local("local int4+EF outer lr 1.5", "int4", "sharded", 5, (0,), error_feedback=True, outer_lr=1.5, outer_momentum=0.0)
    local("local int8", "int8", "sharded", 10, (0,), **average)
    local("local int4+EF outer lr 2", "int4", "sharded", 5, (0,), error_feedback=True, outer_lr=2.0, outer_momentum=0.0)
    local("local int4+EF outer lr 2", "int4", "sharded", 10, (0,), error_feedback=True, outer_lr=2.0, outer_momentum=0.0)
    # Per step (DDP, one exchange of the gradients every step): the peers' curve and the best codec
    for r in (4, 2):
        add(f"PowerSGD r{r}", "torch:powersgd", {"rank": r})
    add("int4+EF sharded", "int4", {"error_feedback": True, "path": "sharded"})
    local("local int4+EF", "int4", "sharded", 20, (0,), error_feedback=True, **average)
    local("local int4+EF outer lr 1.5", "int4", "sharded", 10, (0,), error_feedback=True, outer_lr=1.5, outer_momentum=0.0)
    local("local int4+EF momentum 0.5", "int4", "sharded", 10, (0,), error_feedback=True, outer_lr=1.0, outer_momentum=0.5)
    local("local int4+EF momentum 0.5", "int4", "sharded", 5, three, error_feedback=True, outer_lr=1.0, outer_momentum=0.5)
    local("local int4+EF momentum 0.3", "int4", "sharded", 5, (0,), error_feedback=True, outer_lr=1.0, outer_momentum=0.3)
    local("local int4+EF momentum 0.7", "int4", "sharded", 5, (0,), error_feedback=True, outer_lr=1.0, outer_momentum=0.7)
    local("local int4+EF momentum 0.5", "int4", "sharded", 20, (0,), error_feedback=True, outer_lr=1.0, outer_momentum=0.5)
    local("streaming int4 4 fragments momentum 0.5", "int4", "sharded", 20, (0,), error_feedback=True, fragments=4, overlap=1,
          mix=0.5, outer_lr=1.0, outer_momentum=0.5)
    local("streaming int4 4 fragments momentum 0.5", "int4", "sharded", 10, (0,), error_feedback=True, fragments=4, overlap=1,
          mix=0.5, outer_lr=1.0, outer_momentum=0.5)
    # DiLoCo's outer Nesterov step, SparseLoCo, Streaming DiLoCo, the pure local-steps reference
    local("local int4+EF Nesterov", "int4", "sharded", 20, (0,), error_feedback=True, **nesterov)
    local("local top-k 2%+EF", "topk", "sharded", 10, (0,), density=0.02, error_feedback=True, feedback_scale=0.95, **average)
    local("streaming int4 4 fragments", "int4", "sharded", 20, (0,), fragments=4, overlap=1, mix=0.5, **nesterov)
    local("local fp32", "fp32", "summable", 10, (0,), **average)
    # The rest of the peers' curve and the per-step codecs
    for r in (1, 8):
        add(f"PowerSGD r{r}", "torch:powersgd", {"rank": r})
    add("bf16", "bf16")
    add("int8 sharded", "int8", {"path": "sharded"})
    add("sign+EF sharded", "sign", {"path": "sharded"})
    add("top-k 1%+EF sharded", "topk", {"density": 0.01, "path": "sharded"})
    # 1-bit Adam and 0-1 Adam (gradcomp.optim; no DDP: a full replica per rank, the optimizer
    # exchanges): fp32 Adam steps while the variance is live, then the momentum through sign + EF
    # on the sharded path; warm-up and freeze as fractions of the steps
    for warmup in (0.15, 0.25):
        add(f"1-bit Adam sign+EF warm-up {round(warmup * 100)}%", "onebit", {"codec": "sign", "path": "sharded", "warmup": warmup})
    add("0-1 Adam sign+EF", "zeroone", {"codec": "sign", "path": "sharded", "freeze": 0.25, "var_update_scaler": 16})
    add("0-1 Adam sign+EF sync every 4", "zeroone", {"codec": "sign", "path": "sharded", "freeze": 0.25,
                                                     "var_update_scaler": 16, "sync_every": 4})
    # Fewer fp32 variance steps (the interval doubles after every 4 updates) and longer local
    # windows: the bytes the fp32 steps leave are what limits the ratio
    for scaler, every in ((16, 8), (4, 4), (4, 8)):
        add(f"0-1 Adam sign+EF scaler {scaler} sync every {every}", "zeroone",
            {"codec": "sign", "path": "sharded", "freeze": 0.25, "var_update_scaler": scaler, "sync_every": every})
    # ... and the full steps' all-reduce in bf16 (as DeepSpeed's fp16 training sends it)
    for every, seeds in ((4, three), (8, (0,)), (2, three)):
        add(f"0-1 Adam sign+EF scaler 4 sync every {every}, bf16 full steps", "zeroone",
            {"codec": "sign", "path": "sharded", "freeze": 0.25, "var_update_scaler": 4, "sync_every": every,
             "full_steps": "bf16"}, seeds)
    add("0-1 Adam sign+EF freeze 15% scaler 4 sync every 4, bf16 full steps", "zeroone",
        {"codec": "sign", "path": "sharded", "freeze": 0.15, "var_update_scaler": 4, "sync_every": 4, "full_steps": "bf16"})
    # Rotations before the low-bit codes (the randomized Hadamard transform of blocks of 256)
    add("int4 rotated+EF sharded", "int4_rotated", {"error_feedback": True, "path": "sharded"})
    add("int2+EF sharded", "int2", {"path": "sharded"})
    add("int2 rotated+EF sharded", "int2_rotated", {"path": "sharded"})
    # DeMo: each rank's own momentum, its 1/128 largest DCT coefficients exchanged, sign steps
    # at their own learning rate (the schedule is AdamW's)
    for lr, seeds in ((1e-3, (0,)), (3e-4, (0,)), (3e-3, (0,)), (1e-2, three), (3e-2, (0,))):
        out.append({"label": f"DeMo dct_topk lr {lr:g}", "optimizer": "adamw", "spec": "demo", "lr": lr, "options": {},
                    "seeds": list(seeds)})
    # ... and fp32 AdamW at DeMo's best learning rate (the benchmark's AdamW runs at 3e-3)
    out.append({"label": "fp32 lr 0.01", "optimizer": "adamw", "spec": "fp32", "lr": 1e-2, "options": {}, "seeds": three})
    return out


def launch(world, runs, steps, out, port):
    mfile = out + ".runs.json"
    with open(mfile, "w") as f:
        json.dump(runs, f)
    procs = []
    for r in range(world):
        cmd = [sys.executable, os.path.join(HERE, "rank.py"), "--rank", str(r), "--world", str(world), "--port", str(port),
               "--methods", mfile, "--steps", str(steps), "--out", out]
        procs.append(subprocess.Popen(cmd, stdout=None if r == 0 else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    errs = [p.communicate()[1] for p in procs]
    return [e[-3000:] for p, e in zip(procs, errs) if p.returncode]


def done(out):
    """(label, seed) of every run in the results file."""
    if not os.path.exists(out):
        return set()
    with open(out) as f:
        return {(r["label"], r["seed"]) for r in map(json.loads, filter(str.strip, f))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1000, help="inner steps of every run")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds for every method (default: each method's)")
    ap.add_argument("--only", default=None, help="comma-separated labels")
    ap.add_argument("--list", action="store_true", help="print the methods and their seeds, run nothing")
    ap.add_argument("--fresh", action="store_true", help="start a new results file")
    ap.add_argument("--time-one", action="store_true",
                    help="train the first method (fp32 unless --only) once, seed 0, into a scratch file; print seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "frontier", "results.jsonl"))
    a = ap.parse_args()
    ms = methods()
    if a.only:
        want = a.only.split(",")
        unknown = set(want) - {m["label"] for m in ms}
        if unknown:
            raise SystemExit(f"no such method: {', '.join(sorted(unknown))}")
        ms = [m for m in ms if m["label"] in want]
    if a.seeds:
        for m in ms:
            m["seeds"] = [int(x) for x in a.seeds.split(",")]
    if a.list:
        for m in ms:
            print(f"{m['label']:32s} seeds {','.join(map(str, m['seeds']))}  {m['spec']} {json.dumps(m['options'])}")
        print(f"{len(ms)} methods, {sum(len(m['seeds']) for m in ms)} runs")
        return
    corpus()  # says which package to install when the corpus is missing
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    # Every method's first seed, then the further seeds: a cut-short run still has every row.
    seeds = sorted({s for m in ms for s in m["seeds"]})
    runs = [{**{k: v for k, v in m.items() if k != "seeds"}, "seed": s} for s in seeds for m in ms if s in m["seeds"]]
    if a.time_one:
        out = a.out + ".timing"
        if os.path.exists(out):
            os.remove(out)
        t = time.time()
        errs = launch(a.world, runs[:1], a.steps, out, 29701)
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU seconds of the ranks over the cores: the wall time on idle cores, about
        print(f"{runs[0]['label']}, {a.steps} steps: {time.time() - t:.0f} s wall, {use.ru_utime + use.ru_stime:.0f} "
              f"CPU s over {a.world} ranks ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})", "\n".join(errs))
        return
    if a.fresh and os.path.exists(a.out):
        os.remove(a.out)
    port, t0 = 29711, time.time()
    while True:
        todo = [r for r in runs if (r["label"], r["seed"]) not in done(a.out)]
        if not todo:
            break
        port += 1
        errs = launch(a.world, todo, a.steps, a.out, port)
        if errs:
            print("a rank failed:\n" + "\n".join(errs), flush=True)
            failed = next((r for r in todo if (r["label"], r["seed"]) not in done(a.out)), None)
            if failed is None:
                break
            # Record the failure and go on with the rest.
            with open(a.out, "a") as f:
                f.write(json.dumps({**failed, "failed": errs[0][-1500:]}) + "\n")
    print(f"all runs: {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
