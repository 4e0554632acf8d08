"""Tensor-parallel benchmark: gradcomp.tp.GPT trained under limited links, per exchange.

    sudo .venv/bin/python benchmarks/tp/run.py          # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/tp/report.py            # table -> docs/model.md, plot -> docs/

1. Loss curves: every exchange trains the benchmark model (rank.py: 2 blocks, d 256, 8 heads,
   512 token rows per step) for --curve-steps steps on loopback; the runs are deterministic,
   so the steps to the target loss do not depend on the link.
2. Step times: the ranks run in their own network namespaces, joined through a bridge by
   `tc tbf`-limited veth pairs (benchmarks/e2e/run.py's setup); at every rate each exchange
   trains --timed-steps steps. The planned exchange is planned for that rate
   (gradcomp.tp.plan, with the chunk overhead measured on that link).
Time to target = steps to target x median time per step.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import run as e2e  # noqa: E402  (the network namespaces and tc shaping)

METHODS = [  # (label, exchange, planned)
    ("fp32 all-reduce", "fp32", False),
    ("bf16 all-reduce", "bf16", False),
    ("AccTFM", "acctfm", False),
    ("AccTFM + planned pipeline", "acctfm", True),
]
RATES = {"100mbit": 100e6, "1gbit": 1e9, "10gbit": 10e9}


def launch(world, methods, steps, out, port, netns, link):
    return e2e.launch(world, methods, steps, out, port, netns, os.path.join(HERE, "rank.py"), ("--link", link))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--curve-steps", type=int, default=300)
    ap.add_argument("--timed-steps", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per rate (report takes the fastest)")
    ap.add_argument("--rates", default=",".join(RATES))
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "build", "tp", "results.json"))
    a = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = os.path.join(os.path.dirname(os.path.abspath(a.out)), "rank0.json")
    res = {"world": a.world, "host": os.uname().nodename, "cpus": os.cpu_count(), "curves": {}, "rates": {}}
    port = 29711
    t = time.time()
    # Curves on loopback; the planned exchange with the 100 Mbit/s plan (the most chunks).
    for label, r in launch(a.world, METHODS, a.curve_steps, tmp, port, False, f"{RATES['100mbit'] / 8},0").items():
        res["curves"][label] = {"losses": r["losses"], "eval": r["eval"], "same": r["same"],
                                "bytes_per_step": r["bytes_sent"] / a.curve_steps}
        print(f"curve  {label:28s} eval {r['eval']:.4f} same {r['same']}", flush=True)
    print(f"curves: {time.time() - t:.0f} s", flush=True)
    e2e.save(res, a.out)
    why = e2e.netns_available()
    res["netns"] = why or "ok"
    if why:
        raise SystemExit(f"network namespaces unavailable ({why}): run as root with iproute2")
    try:
        e2e.netns_up(a.world)
        for rep in range(a.repeats):
            for rate in a.rates.split(","):
                e2e.shape(a.world, rate, e2e.RATES[rate][1])
                port += 1
                for label, r in launch(a.world, METHODS, a.timed_steps, tmp, port, True, f"{RATES[rate] / 8},0").items():
                    res["rates"].setdefault(rate, {}).setdefault(label, []).append(
                        {"step_seconds": r["step_seconds"], "tx_bytes": r["tx_bytes"], "plans": r["plans"],
                         "same": r["same"]})
                    d = sorted(r["step_seconds"][4:])
                    print(f"{rep} {rate:8s} {label:28s} {d[len(d) // 2] * 1e3:8.1f} ms/step", flush=True)
                e2e.save(res, a.out)
    finally:
        e2e.teardown(a.world)
    e2e.save(res, a.out)
    print("wrote", os.path.abspath(a.out))


if __name__ == "__main__":
    main()
