"""gradcomp's codecs on CUDA tensors from Python, against torch on the same tensors.

For each codec and size: compress and accumulate time (CUDA events, median of repeats after a
warm-up), their bandwidth (bytes read and written) as a ratio to a device-to-device copy of the
same bytes timed in the same run, and for exact top-k the time of ``torch.topk`` on the
magnitudes of the same tensor (the selection alone; gradcomp's call also encodes, checksums and
keeps the residual). Then one whole step of the phase codecs on one rank (TAGC-2, and the
sharded path's all-reduce with int8 and top-k; the collectives left out), as a multiple of the
time of a device copy of the gradient's 4n bytes. Writes JSON (and prints Markdown tables):

    python benchmarks/gpu_python.py OUT.json [--sizes 24,27]
"""

import argparse
import json
import statistics

import torch

import gradcomp


def timed(fn, repeats=20):
    """Median seconds of fn() over repeats, after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def copy_gbps(nbytes: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second) for nbytes."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * nbytes / timed(lambda: dst.copy_(src)) / 1e9


def run(codecs, log2_sizes, density):
    rows = []
    for lg in log2_sizes:
        n = 1 << lg
        g = torch.randn(n, device="cuda")
        for name in codecs:
            opts = {"density": density} if name.startswith("topk") else {}
            c = gradcomp.Compressor(name, **opts)
            c.check_interval = 0
            st = c.make_state(n, device="cuda")
            out = torch.empty(c.max_payload_bytes(n), dtype=torch.uint8, device="cuda")
            size = c.compress(g, st, out)
            t_c = timed(lambda: c.compress(g, st, out))
            acc = torch.zeros(n, device="cuda")
            t_a = timed(lambda: c.accumulate(out[:size], acc))
            c.check()
            moved_c = 4 * n + size + (8 * n if c.error_feedback else 0)  # read g (+ e, write e), write payload
            moved_a = size + 8 * n  # read payload, read and write the sum
            copy_c, copy_a = copy_gbps(moved_c // 2), copy_gbps(moved_a // 2)
            row = {"codec": name, "n": n, "payload_bytes": size, "compression": 4 * n / size,
                   "compress_us": t_c * 1e6, "compress_GBps": moved_c / t_c / 1e9, "compress_copy_GBps": copy_c,
                   "accumulate_us": t_a * 1e6, "accumulate_GBps": moved_a / t_a / 1e9, "accumulate_copy_GBps": copy_a}
            row["compress_ratio"] = row["compress_GBps"] / copy_c
            row["accumulate_ratio"] = row["accumulate_GBps"] / copy_a
            if name.startswith("topk"):
                k = max(1, int(n * density))
                row["torch_topk_us"] = timed(lambda: torch.topk(g.abs(), k, sorted=False)) * 1e6
                row["vs_torch_topk"] = row["compress_us"] / row["torch_topk_us"]
            rows.append(row)
    return rows


def run_phases(log2_sizes, density):
    """One step of each phase codec on one rank (the received buffers are the sent ones)."""
    rows = []
    for lg in log2_sizes:
        n = 1 << lg
        g = torch.randn(n, device="cuda")
        out = torch.empty(n, device="cuda")
        copy_s = 2 * 4 * n / (copy_gbps(4 * n) * 1e9)  # one copy of 4n bytes
        tagc = gradcomp.Tagc(density=density)
        tagc.check_interval = 0
        st = tagc.make_state(n, 1, 0, device="cuda")
        bits = torch.empty(tagc.describe(0, st)["count"], dtype=torch.int32, device="cuda")
        cells = torch.empty(tagc.describe(1, st)["count"], dtype=torch.bfloat16, device="cuda")

        def tagc_step():
            tagc.encode(0, g, st, bits)
            tagc.receive(0, st, bits)
            tagc.encode(1, g, st, cells)
            tagc.receive(1, st, cells, out)
            tagc.finish_step(st)

        t = timed(tagc_step)
        tagc.check()
        rows.append({"codec": "tagc", "n": n, "step_us": t * 1e6, "copies": t / copy_s,
                     "sent_bytes": bits.numel() * 4 + cells.numel() * 2, "device_bytes": st.device_bytes})
        for name in ("int8", "topk"):
            opts = {"density": density, "compact_indices": False} if name == "topk" else {}
            sh = gradcomp.Sharded(name, "all_reduce", **opts)
            sh.check_interval = 0
            ss = sh.make_state(n, 1, 0, None, "cuda")
            s0 = torch.empty(sh.describe(0, ss)["send_bytes"], dtype=torch.uint8, device="cuda")
            s1 = torch.empty(sh.describe(1, ss)["send_bytes"], dtype=torch.uint8, device="cuda")

            def sharded_step():
                sh.encode(0, g, ss, s0)
                sh.receive(0, ss, s0)
                sh.encode(1, None, ss, s1)
                sh.receive(1, ss, s1, out)

            t = timed(sharded_step)
            sh.check()
            rows.append({"codec": f"sharded {name}", "n": n, "step_us": t * 1e6, "copies": t / copy_s,
                         "sent_bytes": s0.numel() + s1.numel(), "device_bytes": ss.device_bytes})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--sizes", default="24,27", help="log2 of the element counts")
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--codecs", default="bf16,int8,int4,topk,topk_fp32")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    rows = run(a.codecs.split(","), sizes, a.density)
    phases = run_phases(sizes, a.density)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "build": gradcomp.build_info()}
    with open(a.out, "w") as f:
        json.dump({"info": info, "rows": rows, "phase_rows": phases}, f, indent=1)
    print("| codec | n | compress us | x copy | accumulate us | x copy | compression | torch.topk us | gradcomp / torch.topk |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        t = f"{r['torch_topk_us']:.0f} | {r['vs_torch_topk']:.2f}" if "torch_topk_us" in r else " | "
        print(f"| {r['codec']} | 2^{r['n'].bit_length() - 1} | {r['compress_us']:.0f} | {r['compress_ratio']:.2f} | "
              f"{r['accumulate_us']:.0f} | {r['accumulate_ratio']:.2f} | {r['compression']:.1f} | {t} |")
    print()
    print("| phase codec, one rank | n | step us | copies of 4n bytes | bytes sent | device bytes |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in phases:
        print(f"| {r['codec']} | 2^{r['n'].bit_length() - 1} | {r['step_us']:.0f} | {r['copies']:.1f} | "
              f"{r['sent_bytes']} | {r['device_bytes']} |")


if __name__ == "__main__":
    main()
