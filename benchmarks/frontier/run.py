"""Loss against bytes: held-out loss of a small GPT on English text against the bytes each rank
sends per step, for every gradient exchange, at 4 ranks (gloo on CPU, one process and one
thread per rank).

    ~/.cache/gradcomp-ci/venv/bin/python benchmarks/frontier/run.py --steps 400   # 33 minutes on 2 cores (49 methods)
    ~/.cache/gradcomp-ci/venv/bin/python benchmarks/frontier/report.py           # table -> docs/sharded.md, plot -> docs/

Results go to build/frontier/results.jsonl, one line per method as soon as it is done; a
second run skips the labels already there (delete the file, or pass --fresh, to start over).
--time-one trains fp32 alone for --steps steps and prints the seconds, to size --steps.
rank.py has the corpus, the model and the training loop.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# label, optimizer, spec, options, extras (warmup as a fraction of the steps, dgc momentum)
CODECS = [  # gradcomp codecs run on both paths
    ("int8", "int8", {}),
    ("int4+EF", "int4", {"error_feedback": True}),
    ("fp8_e4m3", "fp8_e4m3", {}),
    ("fp8_e4m3 scaled/128", "fp8_e4m3", {"group": 128}),
    ("qsgd", "qsgd", {}),
    ("sign+EF", "sign", {}),
    ("top-k 1%+EF", "topk", {"density": 0.01}),
    ("top-k 10%+EF", "topk", {"density": 0.1}),
    ("threshold 1%+EF", "threshold", {}),
    ("random-k 1%+EF", "randomk", {}),
]
PATHS = ("gather", "sharded")


def codec(label):
    return next(c for c in CODECS if c[0] == label)


def methods():
    out = []

    def add(label, opt, spec, options=None, **extra):
        out.append({"label": f"{opt} {label}", "optimizer": opt, "spec": spec, "options": options or {}, **extra})

    # AdamW: every method
    add("fp32", "adamw", "fp32")
    add("bf16", "adamw", "bf16")
    for r in (1, 2, 4, 8):
        add(f"PowerSGD r{r}", "adamw", "torch:powersgd", {"rank": r})
    for label, spec, opts in CODECS:
        for path in PATHS:
            add(f"{label} {path}", "adamw", spec, {**opts, "path": path})
    add("TAGC", "adamw", "tagc")
    # SGD with momentum: a subset
    add("fp32", "sgd", "fp32")
    for r in (2, 4):
        add(f"PowerSGD r{r}", "sgd", "torch:powersgd", {"rank": r})
    for label, spec, opts in (codec("int8"), codec("int4+EF"), codec("top-k 1%+EF")):
        for path in PATHS:
            add(f"{label} {path}", "sgd", spec, {**opts, "path": path})
    # What moves a codec down: a dense warm-up (10% of the steps, as PowerSGD's start), DGC momentum
    for label, spec, opts in (codec("top-k 1%+EF"), codec("int4+EF")):
        for path in PATHS:
            add(f"{label} {path} +warm-up", "adamw", spec, {**opts, "path": path}, warmup=0.1)
    for path in PATHS:
        add(f"top-k 1%+EF {path} +warm-up", "sgd", "topk", {"density": 0.01, "path": path}, warmup=0.1)
        add(f"top-k 1%+EF {path} +DGC", "sgd", "topk", {"density": 0.01, "path": path}, dgc=0.9)
    add("top-k 1%+EF gather +DGC +warm-up", "sgd", "topk", {"density": 0.01, "path": "gather"}, dgc=0.9, warmup=0.1)
    # Densities between 1% and 2% (30x fewer bytes than fp32 is about 1.5% on the sharded path)
    for d in (1.5, 2):
        add(f"top-k {d:g}%+EF sharded +warm-up", "adamw", "topk", {"density": d / 100, "path": "sharded"}, warmup=0.1)
    # The seed-to-seed spread of fp32 (another initialisation and other batches)
    for seed in (1, 2):
        add(f"fp32 seed {seed}", "adamw", "fp32", seed=seed)
    return out


def launch(world, todo, steps, seed, out, port):
    mfile = out + ".methods.json"
    with open(mfile, "w") as f:
        json.dump(todo, f)
    procs = []
    for r in range(world):
        cmd = [sys.executable, os.path.join(HERE, "rank.py"), "--rank", str(r), "--world", str(world), "--port", str(port),
               "--methods", mfile, "--steps", str(steps), "--seed", str(seed), "--out", out]
        procs.append(subprocess.Popen(cmd, stdout=None if r == 0 else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    errs = [p.communicate()[1] for p in procs]
    return [e[-3000:] for p, e in zip(procs, errs) if p.returncode]


def done_labels(out):
    if not os.path.exists(out):
        return set()
    with open(out) as f:
        return {json.loads(line)["label"] for line in f if line.strip()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated labels")
    ap.add_argument("--fresh", action="store_true", help="start a new results file")
    ap.add_argument("--time-one", action="store_true", help="train 'adamw fp32' once into a scratch file, print seconds")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "frontier", "results.jsonl"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    ms = methods()
    if a.only:
        want = a.only.split(",")
        ms = [m for m in ms if m["label"] in want]
    for m in ms:  # warm-up fractions -> steps
        if "warmup" in m:
            m["warmup"] = int(m["warmup"] * a.steps)
    if a.time_one:
        out = a.out + ".timing"
        if os.path.exists(out):
            os.remove(out)
        t = time.time()
        errs = launch(a.world, [m for m in ms if m["label"] == "adamw fp32"], a.steps, a.seed, out, 29701)
        print(f"{a.steps} steps: {time.time() - t:.0f} s", "\n".join(errs))
        return
    if a.fresh and os.path.exists(a.out):
        os.remove(a.out)
    port, t0 = 29711, time.time()
    while True:
        todo = [m for m in ms if m["label"] not in done_labels(a.out)]
        if not todo:
            break
        port += 1
        errs = launch(a.world, todo, a.steps, a.seed, a.out, port)
        if errs:
            failed = todo[0] if todo[0]["label"] not in done_labels(a.out) else None
            print("a rank failed:\n" + "\n".join(errs), flush=True)
            if failed is None:
                break
            # Record the failure and go on with the rest.
            with open(a.out, "a") as f:
                f.write(json.dumps({**failed, "failed": errs[0][-1500:]}) + "\n")
    print(f"all methods: {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
