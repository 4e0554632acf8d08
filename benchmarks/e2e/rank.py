"""One rank of the end-to-end benchmark (run.py starts one per network namespace).

Trains gradcomp.testing.TinyTransformer (benchmark size) with DDP over gloo under each of the
given methods in turn (one process start for all) and writes per-step losses, times and
interface byte counts as JSON."""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

from gradcomp import testing

MODEL = dict(vocab=256, d=128, heads=4, layers=2, seq=64)  # ~0.44M parameters, 1.8 MB in fp32

p = argparse.ArgumentParser()
p.add_argument("--rank", type=int, required=True)
p.add_argument("--world", type=int, required=True)
p.add_argument("--master", default="127.0.0.1")
p.add_argument("--port", type=int, default=29611)
p.add_argument("--ifname", default=None)
p.add_argument("--methods", required=True, help='JSON list of [label, spec, options], trained one after another')
p.add_argument("--steps", type=int, required=True)
p.add_argument("--out", required=True)
a = p.parse_args()

os.environ["MASTER_ADDR"] = a.master
if a.ifname:
    os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
testing.init_process_group(a.rank, a.world, a.port, threads=1)


def tx_bytes():  # bytes this rank's interface has sent (inside its network namespace)
    if not a.ifname:
        return 0
    with open(f"/sys/class/net/{a.ifname}/statistics/tx_bytes") as f:
        return int(f.read())


times, sent = [], []  # per method: its start, then one entry per step


def on_step(step):
    times.append(time.perf_counter())
    sent.append(tx_bytes())


results = {}
for label, spec, options in json.loads(a.methods):
    times, sent = [time.perf_counter()], [tx_bytes()]
    r = testing.train(spec, a.steps, options=options, batch=8, seq=MODEL["seq"],
                      model_kw={k: v for k, v in MODEL.items() if k != "seq"}, on_step=on_step)
    results[label] = {"spec": spec, "options": options, "losses": r["losses"], "step_times": times[1:],
                      "tx_bytes": sent[1:], "bytes_sent": r["bytes_sent"], "eval": r["eval"],
                      "params": r["params"].numel()}
if a.rank == 0:
    with open(a.out, "w") as f:
        json.dump(results, f)
dist.barrier()
# Leave without gloo's teardown, which can abort at interpreter exit ("terminate called
# without an active exception") after the results are written.
os._exit(0)
