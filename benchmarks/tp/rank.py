"""One rank of the tensor-parallel benchmark (run.py starts one per network namespace).

Trains gradcomp.tp.GPT (benchmark size) under each of the given exchanges in turn (one process
start for all) and writes per-step losses, step times, interface byte counts and the planner's
plans as JSON."""

import argparse
import json
import os

import torch.distributed as dist

from gradcomp import testing

MODEL = dict(vocab=256, d=256, heads=8, layers=2, seq=64)  # 512 token rows of 256 per exchange
BATCH = 8

p = argparse.ArgumentParser()
p.add_argument("--rank", type=int, required=True)
p.add_argument("--world", type=int, required=True)
p.add_argument("--master", default="127.0.0.1")
p.add_argument("--port", type=int, default=29711)
p.add_argument("--ifname", default=None)
p.add_argument("--methods", required=True, help="JSON list of [label, exchange, planned]")
p.add_argument("--link", default="1.25e7,0", help="bytes_per_s,latency_s the planner plans for")
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


link = tuple(float(v) for v in a.link.split(","))
results = {}
for label, exchange, planned in json.loads(a.methods):
    sent = tx_bytes()
    r = testing.train_tp(exchange, a.steps, batch=BATCH, seq=MODEL["seq"], chunks="plan" if planned else None,
                         plan_link=link, model_kw={k: v for k, v in MODEL.items() if k != "seq"})
    results[label] = {"exchange": exchange, "planned": planned, "losses": r["losses"], "eval": r["eval"],
                      "step_seconds": r["step_seconds"], "tx_bytes": tx_bytes() - sent, "bytes_sent": r["bytes_sent"],
                      "same": r["same"], "plans": r["plans"]}
if a.rank == 0:
    with open(a.out, "w") as f:
        json.dump(results, f)
dist.barrier()
os._exit(0)  # without gloo's teardown, which can abort at exit after the results are written
