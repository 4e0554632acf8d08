"""gradcomp._core on torch tensors: no copies, errors as exceptions, state checkpoints."""

import numpy as np
import pytest
import torch

import gradcomp

import dist_util


def compress(c, g, st=None):
    st = st or c.make_state(g.numel())
    out = torch.empty(c.max_payload_bytes(g.numel(), g.dtype), dtype=torch.uint8)
    return out[: c.compress(g, st, out)], st


def test_every_codec_round_trips():
    g = torch.randn(10_000, generator=torch.Generator().manual_seed(1))
    required = {"acctfm": {"cols": 100}, "dct_topk": {"cols": 128}}  # rows of that many values (the codecs with a required option)
    for name in gradcomp.codecs():
        c = gradcomp.Compressor(name, **required.get(name, {}))
        frames, _ = compress(c, g)
        out = torch.zeros_like(g)
        c.decompress(frames, out)
        err = (out - g).norm() / g.norm()
        # Biased codecs are contractions (top-k 1%: ~0.99; acctfm keeps 1/8 of each row; dct_topk
        # 1% of the DCT coefficients of each row);
        # unbiased ones (QSGD, TernGrad, random-k) may have a larger error, but a bounded one.
        assert err < 3.0, (name, float(err))
        if name in ("fp32", "bf16", "fp16", "int8"):
            assert err < 0.02, (name, float(err))


def test_compress_writes_into_the_callers_tensor():
    c = gradcomp.Compressor("int8")
    g = torch.randn(4096)
    out = torch.zeros(c.max_payload_bytes(4096), dtype=torch.uint8)
    n = c.compress(g, c.make_state(4096), out)
    assert n > 0 and out[:4].tolist() != [0, 0, 0, 0]  # written in place: the frame's magic


def test_accumulate_adds_in_place_and_bf16_gradients_work():
    c = gradcomp.Compressor("topk", density=0.1)
    g = torch.randn(1000).to(torch.bfloat16)
    frames, _ = compress(c, g)
    s = torch.ones(1000, dtype=torch.bfloat16)
    ptr = s.data_ptr()
    c.accumulate(frames, s)
    assert s.data_ptr() == ptr and int((s != 1).sum()) == 100


def test_residual_is_a_view_and_error_feedback_conserves():
    c = gradcomp.Compressor("topk", density=0.01)
    g = torch.randn(20_000)
    frames, st = compress(c, g)
    sent = torch.zeros_like(g)
    c.decompress(frames, sent)
    residual = torch.from_dlpack(st.residual)
    assert torch.allclose(sent + residual, g, atol=1e-6)
    residual.zero_()  # a view: the state sees it
    assert float(np.abs(np.asarray(st.residual)).sum()) == 0.0


def test_errors_are_exceptions_with_codes():
    c = gradcomp.Compressor("topk", density=0.01)
    frames, _ = compress(c, torch.randn(5000))
    out = torch.zeros(5000)
    bad = frames.clone()
    bad[bad.numel() // 2 + 40] ^= 0xFF  # a value byte (header first; the last bytes may be padding)
    with pytest.raises(gradcomp.Error) as e:
        c.accumulate(bad, out)
    assert e.value.code == "checksum_mismatch" and float(out.abs().sum()) == 0.0  # untouched
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Compressor("int8").accumulate(frames, out)
    assert e.value.code == "codec_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        c.accumulate(frames[:10], out)
    assert e.value.code == "truncated"
    with pytest.raises(gradcomp.Error, match="densty"):
        gradcomp.Compressor("topk", densty=0.1)
    with pytest.raises(gradcomp.Error, match="unknown codec"):
        gradcomp.Compressor("zip")
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Compressor("topk", density=2.0)
    assert e.value.code == "invalid_argument"
    with pytest.raises(TypeError):
        c.compress(torch.randn(10, dtype=torch.float64), c.make_state(10), torch.empty(4096, dtype=torch.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        c.compress(torch.randn(10, 2).t(), c.make_state(20), torch.empty(4096, dtype=torch.uint8))
    with pytest.raises(gradcomp.Error) as e:
        c.compress(torch.randn(10), c.make_state(10), torch.empty(8, dtype=torch.uint8))
    assert e.value.code == "buffer_too_small"


def test_state_checkpoint_round_trip():
    c = gradcomp.Compressor("threshold", density=0.01)
    g = torch.randn(50_000)
    _, st = compress(c, g)
    _, st = compress(c, g, st)
    blob = st.checkpoint()
    other = c.make_state(g.numel())
    other.restore(blob)
    assert other.step == 2 and np.array_equal(np.asarray(other.residual), np.asarray(st.residual))
    assert np.array_equal(np.asarray(other.thresholds), np.asarray(st.thresholds))
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Compressor("topk").make_state(g.numel()).restore(blob)
    assert e.value.code == "codec_mismatch"


def test_summable_casts_use_the_library_conversion():
    x = torch.randn(1000) * 100
    bf = gradcomp.Compressor("bf16")
    assert bf.summable and not gradcomp.Compressor("int8").summable
    w = torch.empty(1000, dtype=torch.bfloat16)
    bf.encode_cast(x, w, 0.5)
    assert torch.equal(w, (x * 0.5).to(torch.bfloat16))  # both round to nearest even
    back = torch.ones(1000)
    bf.decode_cast(w, back, add=True)
    assert torch.equal(back, 1 + w.float())
    h = torch.empty(1000, dtype=torch.float16)
    gradcomp.Compressor("fp16").encode_cast(x, h)
    assert torch.equal(h, x.to(torch.float16))


@pytest.mark.parametrize("bitmap,cells", [("or", "bf16"), ("sum_safe", "fp32")])
def test_tagc_phases_on_tensors(bitmap, cells):
    world, n = 3, 30_001
    codec = gradcomp.Tagc(bitmap=bitmap, cells=cells)
    assert codec.phase_count == 2 and codec.config["bitmap"] == bitmap
    states = [codec.make_state(n, world, r) for r in range(world)]
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(n, generator=gen) for _ in range(world)]
    whole = dist_util.simulate_tagc(codec, states, grads)
    assert all(torch.equal(whole[0], o) for o in whole[1:])  # every rank decodes the same
    items, peeled, _ = states[0].stats
    assert items > 0.02 * n and peeled == items
    # What was delivered plus what every rank still owes is what was given (error feedback),
    # up to the rounding of the summed cells: fp32 (measured 3e-6), bf16 (relative 1.7e-3).
    owed = sum(torch.from_dlpack(st.residual) for st in states)
    err = whole[0] + owed - sum(grads)
    if cells == "fp32":
        assert float(err.abs().max()) < 1e-4
    else:
        assert float(err.norm() / sum(grads).norm()) < 5e-3
    assert all(st.step == 1 for st in states)
    # Reduce-scatter: rank r decodes only its shard, the same values.
    states2 = [codec.make_state(n, world, r) for r in range(world)]
    shards = dist_util.simulate_tagc(codec, states2, grads, shard=True)
    assert torch.equal(torch.cat(shards), whole[0])


def test_tagc_errors_and_checkpoints():
    codec = gradcomp.Tagc()
    st = codec.make_state(4096, 2, 1)
    g = torch.randn(4096)
    with pytest.raises(gradcomp.Error) as e:
        codec.describe(1, st)  # the sketch's size is known after receive(0)
    assert e.value.code == "invalid_argument"
    with pytest.raises(TypeError):
        codec.encode(0, g, st, torch.empty(codec.describe(0, st)["count"], dtype=torch.float64))
    with pytest.raises(gradcomp.Error) as e:
        codec.encode(0, g, st, torch.empty(3, dtype=torch.int32))
    assert e.value.code == "size_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Tagc(block=2).describe(0, st)  # a state of another configuration
    assert e.value.code == "codec_mismatch"
    with pytest.raises(gradcomp.Error, match="bitmapp"):
        gradcomp.Tagc(bitmapp="or")
    with pytest.raises(gradcomp.Error):
        gradcomp.Tagc("tagc3")
    assert gradcomp.Tagc("tagc2").config["sizing"] == "ratio" and gradcomp.Tagc("v1").config["cells"] == "fp32"
    # Checkpoints: exact at the same world size and rank; corrupted bytes are refused.
    states = [codec.make_state(4096, 2, r) for r in range(2)]
    dist_util.simulate_tagc(codec, states, [torch.randn(4096), torch.randn(4096)])
    blob = codec.checkpoint(states[1])
    again = codec.make_state(4096, 2, 1)
    codec.load_checkpoint(again, blob)
    assert again.step == 1 and np.array_equal(np.asarray(again.residual), np.asarray(states[1].residual))
    bad = bytearray(blob)
    bad[100] ^= 1
    with pytest.raises(gradcomp.Error) as e:
        codec.load_checkpoint(codec.make_state(4096, 2, 1), bytes(bad))
    assert e.value.code == "checksum_mismatch"
    # Elastic: 2 ranks into 3; the residuals' sum is kept, each new rank holding its shard of it.
    saved = [codec.checkpoint(s) for s in states]
    new = [codec.make_state(4096, 3, r) for r in range(3)]
    for s in new:
        codec.restore_elastic(s, saved)
    before = torch.from_dlpack(states[0].residual) + torch.from_dlpack(states[1].residual)
    after = sum(torch.from_dlpack(s.residual) for s in new)
    assert torch.equal(before, after) and all(s.step == 1 for s in new)
    assert float(torch.from_dlpack(new[1].residual)[:1366].abs().sum()) == 0.0  # off its shard


def test_summable_cast_phase():
    c = gradcomp.SummableCast("bf16", feedback=True)
    states = [c.make_state(1000, 2, r) for r in range(2)]
    g = [torch.randn(1000) for _ in range(2)]
    p = c.describe(0, states[0])
    assert p["type"] == "bf16" and p["op"] == "sum" and p["shardable"]
    bufs = [torch.empty(p["count"], dtype=torch.bfloat16) for _ in range(2)]
    for x, st, b in zip(g, states, bufs):
        c.encode(0, x, st, b)
    out = torch.zeros(1000)
    c.receive(0, states[0], (bufs[0].float() + bufs[1].float()).bfloat16(), out)
    sent = bufs[0].float() + bufs[1].float()
    assert torch.allclose(out, sent, rtol=2**-7)
    assert torch.allclose(torch.from_dlpack(states[0].residual), g[0] - bufs[0].float())  # the cast's rounding
    with pytest.raises(gradcomp.Error):
        c.checkpoint(states[0])  # casts keep no state across steps


def test_many_buffers_in_one_call_equal_one_call_each():
    c = gradcomp.Compressor("topk", density=0.05)
    sizes = [1000, 4096, 3]
    grads = [torch.randn(n, generator=torch.Generator().manual_seed(n)) for n in sizes]
    caps = [c.max_payload_bytes(n) for n in sizes]
    offsets = [16 + sum((cap + 7) // 8 * 8 for cap in caps[:j]) for j in range(len(sizes))]
    block = offsets[-1] + caps[-1]
    layout = c.gather_layout(sizes, [None, torch.float32, None])
    assert layout == {"offsets": offsets, "caps": caps, "slot_offsets": [], "small_offset": (block + 7) // 8 * 8,
                      "block_bytes": (block + 7) // 8 * 8}
    with_rest = c.gather_layout(sizes, [None] * 3, [24, 40], 3, False)
    assert with_rest["slot_offsets"] == [layout["small_offset"], layout["small_offset"] + 24]
    assert with_rest["small_offset"] == layout["small_offset"] + 64 and with_rest["block_bytes"] == layout["small_offset"] + 80
    assert c.gather_layout([], [], [], 3, False)["block_bytes"] == 12 and c.gather_layout([], [], [], 3, True)["block_bytes"] == 16
    assert c.gather_layout([10], [torch.bfloat16])["caps"] == [c.max_payload_bytes(10, torch.bfloat16)]
    out = torch.zeros(block, dtype=torch.uint8)
    states = [c.make_state(n) for n in sizes]
    got = c.compress_many(grads, states, out, offsets)
    one = [c.make_state(n) for n in sizes]
    for j, n in enumerate(sizes):
        single = torch.zeros(caps[j], dtype=torch.uint8)
        assert c.compress(grads[j], one[j], single) == got[j]
        assert torch.equal(single[:got[j]], out[offsets[j]:offsets[j] + got[j]])
        assert states[j].step == 1 and np.array_equal(np.asarray(states[j].residual), np.asarray(one[j].residual))
    # Three ranks' blocks: the sizes from each block's head, or given.
    out[:4 * len(sizes)].view(torch.int32)[:3] = torch.tensor(got, dtype=torch.int32)
    gathered = out.repeat(3)
    for sizes_arg in (None, got):
        sums = [torch.zeros(n) for n in sizes]
        c.accumulate_many(gathered, block, sums, offsets, sizes_arg)
        for j in range(len(sizes)):
            want = torch.zeros(sizes[j])
            for _ in range(3):
                c.accumulate(out[offsets[j]:offsets[j] + got[j]], want)
            assert torch.equal(sums[j], want)
    # Bad layouts: clear errors, nothing compressed or added.
    with pytest.raises(ValueError, match="one state and one offset"):
        c.compress_many(grads, states[:2], out, offsets)
    with pytest.raises(ValueError, match="multiple of 8"):
        c.compress_many(grads, states, out, [offsets[0] + 4] + offsets[1:])
    with pytest.raises(ValueError, match="must lie in out"):
        c.compress_many(grads, states, out[:block - 8], offsets)
    with pytest.raises(gradcomp.Error) as e:
        c.compress_many(grads, [states[1], states[0], states[2]], out, offsets)
    assert e.value.code == "size_mismatch" and states[0].step == 1
    with pytest.raises(gradcomp.Error) as e:
        c.accumulate_many(gathered[:-1], block, sums, offsets)
    assert e.value.code == "size_mismatch"
    bad = gathered.clone()
    bad[2 * block + offsets[1] + 100] ^= 1  # the last rank's payload of the second output
    before = [s.clone() for s in sums]
    with pytest.raises(gradcomp.Error) as e:
        c.accumulate_many(bad, block, sums, offsets)
    assert e.value.code == "checksum_mismatch"
    assert all(torch.equal(s, b) for s, b in zip(sums, before))  # all or nothing


# --- On every device: the CPU, and cuda:0 (marked gpu) against the CPU's bytes ---------------

INFO = gradcomp.build_info()
SPARSE = ("topk", "topk_fp32", "topk_int8")
N = 100_003  # odd: bf16 sections end in padding; several chunks below
NT = 100_005  # odd, a multiple of 3 and 5: every shard of W = 1, 3, 5 has NT / W elements
_bits, _host = dist_util.bits, dist_util.host


def _pair(name, **options):
    """The same codec twice (CPU, device); sparse frames as u32 lists, which the GPU writes."""
    opts = {"chunk_bytes": 65536, **options}
    if name in SPARSE:
        opts.update(compact_indices=False, density=0.01)
    return gradcomp.Compressor(name, **opts), gradcomp.Compressor(name, **opts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", INFO["cuda_codecs"])
def test_payloads_equal_the_cpu(name, dtype, device):
    for feedback in (False, True):
        cpu, dev = _pair(name, error_feedback=feedback)
        s_cpu, s_dev = cpu.make_state(N), dev.make_state(N, device=device)
        g = torch.Generator().manual_seed(7)
        for step in range(3):
            grad = (torch.randn(N, generator=g) * 10.0 ** (step - 2)).to(dtype)
            out_cpu = torch.zeros(cpu.max_payload_bytes(N, dtype), dtype=torch.uint8)
            out_dev = torch.zeros(cpu.max_payload_bytes(N, dtype), dtype=torch.uint8, device=device)
            n_cpu = cpu.compress(grad, s_cpu, out_cpu)
            n_dev = dev.compress(grad.to(device), s_dev, out_dev)
            assert n_dev == n_cpu, (name, feedback, step)
            assert torch.equal(out_dev[:n_dev].cpu(), out_cpu[:n_cpu]), (name, feedback, step)
            assert s_dev.step == s_cpu.step == step + 1
            if s_cpu.residual.shape[0]:
                assert np.array_equal(_bits(s_dev.residual), np.asarray(s_cpu.residual).view(np.int32))
            for add in (False, True):
                start = torch.randn(N, generator=g).to(dtype)
                want, got = start.clone(), start.to(device)
                (cpu.accumulate if add else cpu.decompress)(out_cpu[:n_cpu], want)
                (dev.accumulate if add else dev.decompress)(out_dev[:n_dev], got)
                assert np.array_equal(_bits(got), _bits(want)), (name, feedback, step, add)
        dev.check()


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp32"])
def test_summable_casts_equal_the_cpu(name, device):
    c = gradcomp.Compressor(name)
    wire = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]
    src = torch.randn(N, generator=torch.Generator().manual_seed(3)) * 1e-3
    src[:4] = torch.tensor([float("nan"), float("inf"), -0.0, 1e-40])
    codes, dcodes = torch.empty(N, dtype=wire), torch.empty(N, dtype=wire, device=device)
    c.encode_cast(src, codes, 0.25)
    c.encode_cast(src.to(device), dcodes, 0.25)
    assert np.array_equal(_bits(dcodes), _bits(codes))
    dst, ddst = torch.ones(N), torch.ones(N, device=device)
    c.decode_cast(codes, dst, add=True)
    c.decode_cast(dcodes, ddst, add=True)
    assert np.array_equal(_bits(ddst), _bits(dst))


@pytest.mark.parametrize("name", ["int8", "topk"])
def test_a_corrupted_payload_raises_at_the_next_check_and_leaves_the_output(name, device):
    """On the CPU the call raises; on a device the next check() does. The output is untouched."""
    c = gradcomp.Compressor(name, density=0.01) if name == "topk" else gradcomp.Compressor(name)
    grad = torch.randn(N, device=device)
    st = c.make_state(N, device=device)
    out = torch.empty(c.max_payload_bytes(N), dtype=torch.uint8, device=device)
    n = c.compress(grad, st, out)
    bad = out[:n].clone()
    bad[n // 2] ^= 4
    acc = torch.randn(N, device=device)
    before = acc.clone()
    assert dist_util.raised(device, lambda: c.accumulate(bad, acc), c.check).code == "checksum_mismatch"
    assert torch.equal(acc, before)
    c.check()  # the report was read and cleared
    c.accumulate(out[:n], acc)
    c.check()
    assert not torch.equal(acc, before)


def test_the_report_is_read_every_check_interval_calls(device):
    c = gradcomp.Compressor("int8")
    c.check_interval = 2
    st = c.make_state(1000, device=device)
    out = torch.empty(c.max_payload_bytes(1000), dtype=torch.uint8, device=device)
    n = c.compress(torch.randn(1000, device=device), st, out)  # call 1
    out[100] ^= 1
    with pytest.raises(gradcomp.Error) as e:
        c.decompress(out[:n], torch.zeros(1000, device=device))  # call 2: the interval's check
    assert e.value.code == "checksum_mismatch"


def test_non_finite_gradients_are_reported_and_change_nothing(device):
    c = gradcomp.Compressor("topk", density=0.1, allow_non_finite=False)
    st = c.make_state(4096, device=device)
    grad = torch.randn(4096, device=device)
    grad[17] = float("nan")
    out = torch.empty(c.max_payload_bytes(4096), dtype=torch.uint8, device=device)
    assert dist_util.raised(device, lambda: c.compress(grad, st, out), c.check).code == "non_finite_value"
    assert st.step == 0 and not st.residual.any()


def test_device_states_checkpoint_to_any_device(device):
    c = gradcomp.Compressor("topk", density=0.05)
    n = 5000
    st = c.make_state(n, device=device)
    out = torch.empty(c.max_payload_bytes(n), dtype=torch.uint8, device=device)
    for _ in range(3):
        c.compress(torch.randn(n, device=device), st, out)
    assert st.step == 3 and st.device.startswith(device)
    blob = st.checkpoint()
    host = c.make_state(n)
    host.restore(blob)
    assert host.step == 3 and np.array_equal(np.asarray(host.residual), _host(st.residual))
    back = c.make_state(n, device=device)
    back.restore(host.checkpoint())
    assert back.step == 3 and np.array_equal(_host(back.residual), _host(st.residual))
    with pytest.raises(gradcomp.Error):
        back.restore(blob[:-1])
    assert back.step == 3 and np.array_equal(_host(back.residual), _host(st.residual))
    back.step = 9
    assert back.step == 9


@pytest.mark.parametrize("name", ["topk", "int8", "bf16"])
def test_many_buffers_equal_the_cpu(name, device):
    """compress_many / accumulate_many on the device's tensors: the CPU's bytes, states and sums."""
    cpu, dev = _pair(name, error_feedback=True)
    sizes = [1000, 70_001, 3]
    grads = [torch.randn(n, generator=torch.Generator().manual_seed(n)) for n in sizes]
    caps = [cpu.max_payload_bytes(n) for n in sizes]
    offsets = [16 + sum((c + 7) // 8 * 8 for c in caps[:j]) for j in range(len(sizes))]
    block = (offsets[-1] + caps[-1] + 7) // 8 * 8
    out_cpu = torch.zeros(block, dtype=torch.uint8)
    out_dev = torch.zeros(block, dtype=torch.uint8, device=device)
    s_cpu = [cpu.make_state(n) for n in sizes]
    s_dev = [dev.make_state(n, device=device) for n in sizes]
    got_cpu = cpu.compress_many(grads, s_cpu, out_cpu, offsets)
    got_dev = dev.compress_many([g.to(device) for g in grads], s_dev, out_dev, offsets)
    assert got_dev == got_cpu
    for j in range(len(sizes)):
        a = offsets[j]
        assert torch.equal(out_dev[a:a + got_dev[j]].cpu(), out_cpu[a:a + got_cpu[j]])
        if s_cpu[j].residual.shape[0]:
            assert np.array_equal(_bits(s_dev[j].residual), np.asarray(s_cpu[j].residual).view(np.int32))
    out_cpu[:12].view(torch.int32)[:] = torch.tensor(got_cpu, dtype=torch.int32)
    if device == "cpu":  # the CPU reads the frame sizes from the block; a device takes them as an argument
        out_dev[:12].view(torch.int32)[:] = torch.tensor(got_dev, dtype=torch.int32)
    sums_cpu = [torch.zeros(n) for n in sizes]
    sums_dev = [torch.zeros(n, device=device) for n in sizes]
    cpu.accumulate_many(out_cpu.repeat(3), block, sums_cpu, offsets)
    dev.accumulate_many(out_dev.repeat(3), block, sums_dev, offsets, got_dev)
    dev.check()
    for a, b in zip(sums_dev, sums_cpu):
        assert np.array_equal(_bits(a), _bits(b))


def _tagc_step(codec, states, grads, dtype):
    """One TAGC step of len(states) simulated ranks. The reductions run on the CPU (OR / SUM of
    the bitmaps, the cells summed in float32 in rank order and rounded to the cell type), so
    both backends get the same reduced bytes. Returns each rank's bitmap, cells and whole output,
    and the reduced cells."""
    dev = grads[0].device
    p0 = codec.describe(0, states[0])
    bits = [torch.zeros(p0["count"], dtype=torch.int32, device=dev) for _ in states]
    for g, st, b in zip(grads, states, bits):
        codec.encode(0, g, st, b)
    red = bits[0].cpu()
    for b in bits[1:]:
        red = red | b.cpu() if p0["op"] == "bor" else red + b.cpu()
    for st in states:
        codec.receive(0, st, red.to(dev))
    p1 = codec.describe(1, states[0])
    cells = [torch.empty(p1["count"], dtype=dtype, device=dev) for _ in states]
    for g, st, c in zip(grads, states, cells):
        codec.encode(1, g, st, c)
    summed = sum(c.cpu().float() for c in cells).to(dtype).to(dev)
    outs = []
    for st in states:
        out = torch.full((NT,), 7.0, device=dev)
        codec.receive(1, st, summed, out)
        outs.append(out)
    return bits, cells, outs, summed


@pytest.mark.parametrize("world", [1, 3])
@pytest.mark.parametrize("options", [{}, {"bitmap": "sum_safe"}, {"cells": "fp32", "preset": "tagc2"}])
def test_tagc_phases_equal_the_cpu(world, options, device):
    """Every TAGC phase on the device's states: the CPU's bitmap words, each shard's first
    rows x block cells (on CUDA the rest of the padded shard zero), outputs, residuals,
    thresholds and checkpoints."""
    opts = dict(options)
    codec = gradcomp.Tagc(opts.pop("preset", "default"), density=0.01, **opts)
    dtype = torch.float32 if codec.config["cells"] == "fp32" else torch.bfloat16
    block = codec.config["block"]
    s_cpu = [codec.make_state(NT, world, r) for r in range(world)]
    s_dev = [codec.make_state(NT, world, r, device=device) for r in range(world)]
    if device == "cuda":
        assert s_dev[0].device == "cuda:0" and s_dev[0].device_bytes > 0
    g = torch.Generator().manual_seed(world)
    for step in range(3):
        grads = [torch.randn(NT, generator=g) * 10.0 ** (step - 1) for _ in range(world)]
        b_cpu, c_cpu, o_cpu, _ = _tagc_step(codec, s_cpu, grads, dtype)
        b_dev, c_dev, o_dev, _ = _tagc_step(codec, s_dev, [x.to(device) for x in grads], dtype)
        rows = s_cpu[0].rows
        for r in range(world):
            assert torch.equal(b_dev[r].cpu(), b_cpu[r]), (step, r)
            assert s_dev[r].rows == rows
            padded = c_dev[r].cpu().view(world, -1)
            assert padded.shape[1] >= rows * block
            assert np.array_equal(_bits(padded[:, :rows * block]), _bits(c_cpu[r].view(world, rows * block))), (step, r)
            assert not padded[:, rows * block:].float().abs().sum()
            assert np.array_equal(_bits(o_dev[r]), _bits(o_cpu[r])), (step, r)
        for a, b in zip(s_dev, s_cpu):
            codec.finish_step(a)
            codec.finish_step(b)
            assert a.step == b.step == step + 1 and a.stats == b.stats
            assert np.array_equal(_bits(a.residual), np.asarray(b.residual).view(np.int32))
            assert np.array_equal(_bits(a.thresholds), np.asarray(b.thresholds).view(np.int32))
            assert codec.checkpoint(a) == codec.checkpoint(b)
    codec.check()
    # A CPU checkpoint continues on the device, and the device's on the CPU.
    moved = codec.make_state(NT, world, 0, device=device)
    codec.load_checkpoint(moved, codec.checkpoint(s_cpu[0]))
    assert moved.step == 3 and codec.checkpoint(moved) == codec.checkpoint(s_cpu[0])
    back = codec.make_state(NT, world, 0)
    codec.load_checkpoint(back, codec.checkpoint(s_dev[0]))
    assert np.array_equal(np.asarray(back.residual), _host(s_dev[0].residual))


def test_tagc_shard_receive_equals_the_cpu(device):
    """receive(1) of a rank's shard (a reduce-scatter's output): on CUDA the padded shard of
    R x block cells, on the CPU the packed one; the same decoded shard."""
    world, codec = 3, gradcomp.Tagc(density=0.02)
    block = codec.config["block"]
    s_cpu = [codec.make_state(NT, world, r) for r in range(world)]
    s_dev = [codec.make_state(NT, world, r, device=device) for r in range(world)]
    grads = [torch.randn(NT, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    for states, gs in ((s_cpu, grads), (s_dev, [x.to(device) for x in grads])):
        p0 = codec.describe(0, states[0])
        bits = [torch.zeros(p0["count"], dtype=torch.int32, device=gs[0].device) for _ in states]
        for x, st, b in zip(gs, states, bits):
            codec.encode(0, x, st, b)
        red = bits[0].cpu()
        for b in bits[1:]:
            red = red | b.cpu()
        for st in states:
            codec.receive(0, st, red.to(gs[0].device))
        p1 = codec.describe(1, states[0])
        cells = [torch.empty(p1["count"], dtype=torch.bfloat16, device=gs[0].device) for _ in states]
        for x, st, c in zip(gs, states, cells):
            codec.encode(1, x, st, c)
        summed = sum(c.cpu().float() for c in cells).to(torch.bfloat16).to(gs[0].device)
        outs = []
        for r, st in enumerate(states):
            s = p1["shard_count"]
            out = torch.zeros(NT // world, device=gs[0].device)
            codec.receive(1, st, summed[r * s:(r + 1) * s].clone(), out)
            codec.finish_step(st)
            outs.append(out.cpu())
        if states is s_cpu:
            want = outs
        else:
            assert s_dev[0].rows == s_cpu[0].rows and p1["shard_count"] >= s_cpu[0].rows * block
            for a, b in zip(outs, want):
                assert np.array_equal(_bits(a), _bits(b))
    codec.check()


_CAST_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.mark.parametrize("wire", ["fp32", "bf16", "fp16"])
def test_summable_cast_states_equal_the_cpu(wire, device):
    """SummableCast with the device's states: the CPU's codes, residuals and decoded sums (whole
    and a rank's shard), with and without feedback, at 1 and 3 ranks."""
    n = NT - 1  # the last shard of 3 is one element short: its code is padding
    for feedback in (False, True):
        codec = gradcomp.SummableCast(wire, feedback=feedback)
        for world in (1, 3):
            s_cpu = [codec.make_state(n, world, r) for r in range(world)]
            s_dev = [codec.make_state(n, world, r, device=device) for r in range(world)]
            g = torch.Generator().manual_seed(world)
            count = codec.describe(0, s_cpu[0])["count"]
            for step in range(3):
                grads = [torch.randn(n, generator=g) * 10.0 ** (step - 1) for _ in range(world)]
                c_cpu = [torch.empty(count, dtype=_CAST_DTYPES[wire]) for _ in range(world)]
                c_dev = [torch.empty(count, dtype=_CAST_DTYPES[wire], device=device) for _ in range(world)]
                for r in range(world):
                    codec.encode(0, grads[r], s_cpu[r], c_cpu[r])
                    codec.encode(0, grads[r].to(device), s_dev[r], c_dev[r])
                    assert np.array_equal(_bits(c_dev[r]), _bits(c_cpu[r])), (wire, feedback, world, step, r)
                summed = sum(c.float() for c in c_cpu).to(_CAST_DTYPES[wire])
                shard = count // world
                for r in range(world):
                    want, got = torch.zeros(n), torch.zeros(n, device=device)
                    codec.receive(0, s_cpu[r], summed, want)
                    codec.receive(0, s_dev[r], summed.to(device), got)
                    assert np.array_equal(_bits(got), _bits(want))
                    size = min(n, (r + 1) * shard) - r * shard
                    want, got = torch.zeros(size), torch.zeros(size, device=device)
                    codec.receive(0, s_cpu[r], summed[r * shard:(r + 1) * shard].clone(), want)
                    codec.receive(0, s_dev[r], summed[r * shard:(r + 1) * shard].to(device), got)
                    assert np.array_equal(_bits(got), _bits(want))
                    codec.finish_step(s_cpu[r])
                    codec.finish_step(s_dev[r])
                    assert s_dev[r].step == s_cpu[r].step == step + 1
                    assert np.array_equal(_host(s_dev[r].residual), np.asarray(s_cpu[r].residual))
            codec.check()
    # A buffer whose padding is not zero (a misrouted shard): the CPU raises at once, a device
    # writes nothing and check() raises the same code.
    codec = gradcomp.SummableCast(wire)
    cpu, dev = codec.make_state(n, 3, 2), codec.make_state(n, 3, 2, device=device)
    bad = torch.zeros(codec.describe(0, cpu)["count"], dtype=_CAST_DTYPES[wire])
    bad[-1] = 1
    with pytest.raises(gradcomp.Error) as want:
        codec.receive(0, cpu, bad, torch.zeros(n))
    out = torch.full((n,), 7.0, device=device)
    got = dist_util.raised(device, lambda: codec.receive(0, dev, bad.to(device), out), codec.check)
    assert got.code == want.value.code
    assert torch.equal(out, torch.full((n,), 7.0, device=device))
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, dev, bad.to(device), torch.zeros(n - 1, device=device))
    assert e.value.code == "size_mismatch"
