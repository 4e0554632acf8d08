"""End-to-end benchmark: DDP training time under a limited link, per gradient exchange.

    sudo .venv/bin/python benchmarks/e2e/run.py            # 13 to 25 minutes on 2 cores
    sudo .venv/bin/python benchmarks/e2e/run.py --world 8 --out build/e2e/results-8.json \
        --curve-steps 200 --rates 100mbit,1gbit --repeats 1   # 8 ranks on the same cores
    .venv/bin/python benchmarks/e2e/report.py              # table -> docs/python.md, plot -> docs/
    sudo .venv/bin/python benchmarks/e2e/run.py --world 8 --out build/e2e/results-8-localsteps.json \
        --curve-steps 200 --rates unlimited,100mbit,1gbit --repeats 1 --set localsteps
    .venv/bin/python benchmarks/e2e/report.py build/e2e/results-8-localsteps.json --tag 8-localsteps

1. Loss curves: every method trains the benchmark model (rank.py) for --curve-steps steps on
   loopback; the run is deterministic, so the steps it needs to reach the target loss do not
   depend on the link.
2. Step times: the ranks run in their own network namespaces, joined through a bridge by veth
   pairs whose both ends `tc ... tbf` limits to each rate; every method trains --timed-steps
   steps per rate, and the bytes each rank's interface sent are read from its counters.
Time to target = steps to target x median time per step. Where namespaces or tc cannot be
used (not root, no iproute2), step 2 is replaced by the alpha-beta model of report.py, and the
results say so.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = [  # (label, spec, options)
    ("fp32 (DDP all-reduce)", "fp32", {}),
    ("torch fp16 hook", "torch:fp16", {}),
    ("torch bf16 hook", "torch:bf16", {}),
    ("torch PowerSGD r4", "torch:powersgd", {"rank": 4}),
    ("gradcomp bf16", "bf16", {}),
    ("gradcomp int8 gather", "int8", {"path": "gather"}),
    ("gradcomp int8 sharded", "int8", {"path": "sharded"}),
    ("gradcomp int4+EF gather", "int4", {"error_feedback": True, "path": "gather"}),
    ("gradcomp int4+EF sharded", "int4", {"error_feedback": True, "path": "sharded"}),
    ("gradcomp top-k 1%+EF gather", "topk", {"density": 0.01, "path": "gather"}),
    ("gradcomp top-k 1%+EF sharded", "topk", {"density": 0.01, "path": "sharded"}),
    ("gradcomp TAGC (DDP all-reduce)", "tagc", {}),
    ("FSDP2 fp32 reduce-scatter", "fsdp:fp32", {}),
    ("gradcomp TAGC (FSDP2 reduce-scatter)", "fsdp:tagc", {}),
    ("gradcomp int8 (FSDP2 reduce-scatter)", "fsdp:int8", {}),
    # Local steps: no exchange per step; every H steps the pseudo-gradient, int4 + EF, sharded,
    # outer Nesterov momentum 0.5 (the defaults measured best at H = 5 to 20: docs/localsteps.md)
    ("gradcomp local steps int4+EF H=5", "localsteps:int4", {"path": "sharded", "period": 5, "error_feedback": True}),
    ("gradcomp local steps int4+EF H=10", "localsteps:int4", {"path": "sharded", "period": 10, "error_feedback": True}),
]
# Named subsets (--set): local steps against fp32, the 16-bit hook, PowerSGD and the best
# per-step codec.
SETS = {"localsteps": ["fp32 (DDP all-reduce)", "torch bf16 hook", "torch PowerSGD r4", "gradcomp int4+EF sharded",
                       "gradcomp local steps int4+EF H=5", "gradcomp local steps int4+EF H=10"]}
RATES = {"unlimited": (None, None), "100mbit": (100e6, "64kb"), "1gbit": (1e9, "256kb"), "10gbit": (10e9, "2mb")}
NS = "gc-e2e"


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def launch(world, methods, steps, out, port, netns, script=os.path.join(HERE, "rank.py"), extra=()):
    """Runs `script` (a rank program taking these arguments, and `extra`) on every rank, in the
    network namespaces when `netns`; returns the JSON rank 0 wrote to `out`."""
    procs = []
    for r in range(world):
        cmd = [sys.executable, script, "--rank", str(r), "--world", str(world), "--port", str(port),
               "--methods", json.dumps(methods), "--steps", str(steps), "--out", out, *extra]
        if netns:
            cmd = ["ip", "netns", "exec", f"{NS}-{r}"] + cmd + ["--master", "10.77.0.1", "--ifname", f"gc{r}"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    errs = [p.communicate()[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a rank failed:\n" + "\n".join(e[-3000:] for e in errs if e))
    with open(out) as f:
        return json.load(f)


def netns_up(world):
    teardown(world)
    sh("ip", "netns", "add", f"{NS}-sw")
    sh("ip", "-n", f"{NS}-sw", "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", f"{NS}-sw", "link", "set", "br0", "up")
    for r in range(world):
        ns = f"{NS}-{r}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"gc{r}", "netns", ns, "type", "veth", "peer", "name", f"gc{r}s", "netns", f"{NS}-sw")
        sh("ip", "-n", ns, "addr", "add", f"10.77.0.{r + 1}/24", "dev", f"gc{r}")
        for n, dev in ((ns, f"gc{r}"), (ns, "lo"), (f"{NS}-sw", f"gc{r}s")):
            sh("ip", "-n", n, "link", "set", dev, "up")
        sh("ip", "-n", f"{NS}-sw", "link", "set", f"gc{r}s", "master", "br0")


def shape(world, rate, burst):
    for r in range(world):
        for ns, dev in ((f"{NS}-{r}", f"gc{r}"), (f"{NS}-sw", f"gc{r}s")):
            if burst is None:  # unlimited: the veth pair as it is (the base of the alpha-beta model)
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
                continue
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
               "latency", "100ms")


def teardown(world):
    for n in [f"{NS}-{r}" for r in range(world)] + [f"{NS}-sw"]:
        sh("ip", "netns", "del", n, check=False)


def netns_available():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        return "not root, or iproute2 (ip, tc) missing"
    probe = sh("ip", "netns", "add", f"{NS}-probe", check=False)
    sh("ip", "netns", "del", f"{NS}-probe", check=False)
    return None if probe.returncode == 0 else "ip netns add failed: " + probe.stderr.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--curve-steps", type=int, default=400)
    ap.add_argument("--timed-steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per rate and method (report takes the fastest)")
    ap.add_argument("--reuse-curves", default=None, help="take step 1 from an earlier results.json")
    ap.add_argument("--rates", default=",".join(RATES))
    ap.add_argument("--only", default=None, help="comma-separated labels of METHODS")
    ap.add_argument("--set", choices=sorted(SETS), default=None, help="a named subset of METHODS")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "build", "e2e", "results.json"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = os.path.join(os.path.dirname(os.path.abspath(a.out)), "rank0.json")
    chosen = SETS[a.set] if a.set else a.only.split(",") if a.only else None
    methods = [m for m in METHODS if chosen is None or m[0] in chosen]
    res = {"world": a.world, "host": os.uname().nodename, "cpus": os.cpu_count(), "methods": {}, "rates": {}}
    port = 29611
    if a.reuse_curves:
        with open(a.reuse_curves) as f:
            res["methods"] = {k: v for k, v in json.load(f)["methods"].items() if k in dict((m[0], 1) for m in methods)}
    if not a.reuse_curves:
        t = time.time()
        for label, r in launch(a.world, methods, a.curve_steps, tmp, port, netns=False).items():
            res["methods"][label] = {"spec": r["spec"], "options": r["options"], "losses": r["losses"], "eval": r["eval"],
                                     "params": r["params"], "loopback_step_times": r["step_times"]}
            print(f"curve  {label:24s} eval {r['eval']:.4f}", flush=True)
        print(f"curves: {time.time() - t:.0f} s", flush=True)
        save(res, a.out)
    why = netns_available()
    res["netns"] = why or "ok"
    if why:
        print(f"network namespaces unavailable ({why}): report.py falls back to the alpha-beta model")
    else:
        try:
            netns_up(a.world)
            # Other jobs may share the cores: every (rate, method) runs --repeats times, the
            # repeats interleaved, and report.py keeps the fastest (least disturbed) run.
            for rep in range(a.repeats):
                for rate in a.rates.split(","):
                    shape(a.world, rate, RATES[rate][1])
                    port += 1
                    for label, r in launch(a.world, methods, a.timed_steps, tmp, port, netns=True).items():
                        res["rates"].setdefault(rate, {}).setdefault(label, []).append(
                            {"step_times": r["step_times"], "tx_bytes": r["tx_bytes"]})
                        d = [y - x for x, y in zip(r["step_times"], r["step_times"][1:])][12:]
                        print(f"{rep} {rate:9s} {label:24s} {sorted(d)[len(d) // 2] * 1e3:8.1f} ms/step", flush=True)
                    save(res, a.out)  # what is measured so far survives a failure later
        finally:
            teardown(a.world)
    save(res, a.out)
    print("wrote", os.path.abspath(a.out))


def save(res, path):
    with open(path + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
