"""gradcomp.Sharded on tensors, W ranks simulated in one process: sums against a plain loop over
ranks, identical replicas, errors with their codes, checkpoints and elastic restore."""

import numpy as np
import pytest
import torch

import gradcomp

import dist_util

WORLDS = [2, 3, 4, 8]


def _grads(n, world, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=gen).to(dtype) for _ in range(world)]


def _rank_order_sum(grads):
    """The plain loop over ranks: fp32 zeros, each rank's gradient added in rank order."""
    total = torch.zeros(grads[0].numel())
    for g in grads:
        total += g.float()
    return total


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


@pytest.mark.parametrize("world", WORLDS)
def test_lossless_codec_sums_bit_for_bit(world):
    # fp32 frames (several per shard: chunk_bytes 4096) summed in rank order, in both modes;
    # bfloat16 gradients: the fp32 sum rounded once to bfloat16.
    for n in (1, 5, 30_011):
        grads = _grads(n, world, n + world)
        want = _rank_order_sum(grads)
        rs = gradcomp.Sharded("fp32", mode="reduce_scatter", chunk_bytes=4096)
        shards = dist_util.simulate_sharded(rs, [rs.make_state(n, world, r) for r in range(world)], grads)
        assert torch.equal(_bits(torch.cat(shards)), _bits(want)), (world, n)
        ar = gradcomp.Sharded("fp32", chunk_bytes=4096)
        states = [ar.make_state(n, world, r) for r in range(world)]
        for out in dist_util.simulate_sharded(ar, states, grads):
            assert torch.equal(_bits(out), _bits(want)), (world, n)
        assert all(st.step == 1 and st.stage == "encode(0)" for st in states)
    bf = _grads(30_011, world, 7, torch.bfloat16)
    ar = gradcomp.Sharded("fp32")
    states = [ar.make_state(30_011, world, r, torch.bfloat16) for r in range(world)]
    outs = dist_util.simulate_sharded(ar, states, bf, dtype=torch.bfloat16)
    assert all(torch.equal(_bits(o), _bits(_rank_order_sum(bf).bfloat16())) for o in outs)
    rs = gradcomp.Sharded("fp32", mode="reduce_scatter")
    states = [rs.make_state(30_011, world, r, torch.bfloat16) for r in range(world)]
    shards = dist_util.simulate_sharded(rs, states, bf, dtype=torch.float32)  # the fp32 sum of bf16 values
    assert torch.equal(_bits(torch.cat(shards)), _bits(_rank_order_sum(bf)))


@pytest.mark.parametrize("world", WORLDS)
def test_lossy_codecs_leave_identical_replicas_near_the_sum(world):
    n = 20_011
    # Sanity bounds on the first step's relative L2 error (two quantizations; top-k keeps the
    # rest in its residuals): far below what a broken decode gives (about 1 or more).
    for name, opts, bound in [("int8", {}, 0.05), ("int4", {"error_feedback": True}, 0.8),
                              ("topk", {"density": 0.05}, 1.0), ("topk_fp32", {"density": 0.05}, 1.0)]:
        codec = gradcomp.Sharded(name, **opts)
        states = [codec.make_state(n, world, r) for r in range(world)]
        given, delivered = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
        for step in range(3):
            grads = _grads(n, world, 100 * world + step)
            want = _rank_order_sum(grads)
            outs = dist_util.simulate_sharded(codec, states, grads)
            assert all(torch.equal(_bits(o), _bits(outs[0])) for o in outs), (name, world, step)
            if step == 0:
                err = float((outs[0] - want).norm() / want.norm())
                assert err < bound, (name, world, err)
            given += want
            delivered += outs[0]
        if name == "topk_fp32":
            # Error feedback on both stages: delivered + what every sender and owner still owes ==
            # what was given (up to fp32 rounding of the sums).
            owed = torch.zeros(n, dtype=torch.float64)
            size = -(-n // world)
            for st in states:
                for j in range(world):
                    r = torch.from_numpy(np.asarray(st.sender_residual(j)))
                    owed[j * size:j * size + r.numel()] += r
                off, count = st.shard
                owed[off:off + count] += torch.from_numpy(np.asarray(st.owner_residual))
            assert float((delivered + owed - given).abs().max()) < 1e-4


def test_describe_sizes_and_bytes_per_rank():
    n, world = 100_000, 4
    for name in ("int8", "topk"):
        codec = gradcomp.Sharded(name)
        st = codec.make_state(n, world, 1)
        p0, p1 = codec.describe(0, st), codec.describe(1, st)
        assert p0["collective"] == "all_to_all" and p1["collective"] == "all_gather"
        assert p0["send_bytes"] == world * p0["slot_bytes"] == p0["receive_bytes"]
        assert p1["send_bytes"] == p1["slot_bytes"] and p1["receive_bytes"] == world * p1["slot_bytes"]
        assert p0["slot_bytes"] % 8 == 0 and p0["wire_bytes"] == (world - 1) * p0["slot_bytes"]
        # A slot: a 16-byte head and the payload of one shard; the all-reduce sends 2 (W - 1) of
        # them where the gather path sends W - 1 payloads of the whole gradient.
        payload = gradcomp.Compressor(name).max_payload_bytes(n // world)
        assert 16 + payload <= p0["slot_bytes"] < 16 + payload + 8
        whole = gradcomp.Compressor(name).max_payload_bytes(n)
        assert p0["wire_bytes"] + p1["wire_bytes"] < 0.6 * (world - 1) * whole
    assert st.shard == (25_000, 25_000) and codec.phase_count == 2
    assert gradcomp.Sharded("int8", mode="reduce_scatter").phase_count == 1
    # The same sizes from (n, world) alone, for any rank and dtype.
    for rank, dtype in ((0, None), (3, torch.bfloat16)):
        st = codec.make_state(n, world, rank, dtype)
        assert [codec.describe_size(k, n, world) for k in (0, 1)] == [codec.describe(k, st) for k in (0, 1)]
    for bad in ((2, n, world), (0, n, 0)):
        with pytest.raises(gradcomp.Error) as e:
            codec.describe_size(*bad)
        assert e.value.code == "invalid_argument"


def test_errors_are_exceptions_with_codes():
    n, world = 5000, 3
    codec = gradcomp.Sharded("int8", mode="reduce_scatter", chunk_bytes=4096)
    states = [codec.make_state(n, world, r) for r in range(world)]
    grads = _grads(n, world, 1)
    p0 = codec.describe(0, states[0])
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Sharded("int8", mode="ring")
    assert e.value.code == "invalid_argument" and "mode" in str(e.value)
    with pytest.raises(gradcomp.Error, match="unknown codec"):
        gradcomp.Sharded("zip")
    with pytest.raises(gradcomp.Error) as e:
        codec.make_state(n, 3, 3)
    assert e.value.code == "invalid_argument"
    with pytest.raises(gradcomp.Error) as e:
        codec.describe(1, states[0])  # reduce-scatter mode has phase 0 only
    assert e.value.code == "invalid_argument"
    # Out of order: receive before encode.
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, states[0], torch.zeros(p0["receive_bytes"], dtype=torch.uint8), torch.empty(states[0].shard[1]))
    assert e.value.code == "invalid_argument" and "order" in str(e.value)
    # Sizes, types, layouts, another codec's state.
    send = torch.empty(p0["send_bytes"], dtype=torch.uint8)
    with pytest.raises(gradcomp.Error) as e:
        codec.encode(0, grads[0], states[0], send[:-8])
    assert e.value.code == "size_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        codec.encode(0, grads[0][:-1], states[0], send)
    assert e.value.code == "size_mismatch"
    with pytest.raises(TypeError):
        codec.encode(0, grads[0].double(), states[0], send)
    with pytest.raises(TypeError, match="float32 gradients"):
        codec.encode(0, grads[0].bfloat16(), states[0], send)
    with pytest.raises(TypeError):
        codec.encode(0, None, states[0], send)
    with pytest.raises(TypeError):
        codec.encode(0, grads[0], states[0], send.view(torch.int32))
    with pytest.raises(ValueError, match="contiguous"):
        codec.encode(0, torch.randn(n, 2)[:, 0], states[0], send)
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Sharded("int4", mode="reduce_scatter").encode(0, grads[0], states[0], send)
    assert e.value.code == "codec_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Sharded("int8", chunk_bytes=4096).describe(0, states[0])  # another mode
    assert e.value.code == "codec_mismatch"
    assert all(st.stage == "encode(0)" and st.step == 0 for st in states)  # nothing advanced
    # Bad slots: each refused with its code, the output untouched, the stage kept; the good
    # bytes are accepted afterwards.
    got = dist_util.sharded_scatter(codec, states, grads)
    slot = p0["slot_bytes"]
    out = torch.full((states[0].shard[1],), 7.0)
    for where, code in [(slot, "bad_magic"),            # slot 1's tag
                        (slot + 4, "bad_header"),       # its sender
                        (slot + 8, "bad_header"),       # its shard
                        (2 * slot - 1, "bad_header"),   # its zero padding
                        (slot + 16 + 200, "checksum_mismatch")]:  # a byte of its first frame
        bad = got[0].clone()
        bad[where] ^= 0x5A
        with pytest.raises(gradcomp.Error) as e:
            codec.receive(0, states[0], bad, out)
        assert e.value.code == code, (where, e.value.code, str(e.value))
        assert bool((out == 7.0).all()) and states[0].stage == "receive(0)"
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, states[0], got[0][:-8], out)
    assert e.value.code == "size_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, states[0], got[1], out)  # the slots of another shard
    assert e.value.code == "bad_header"
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, states[0], got[0], torch.empty(states[0].shard[1] + 1))
    assert e.value.code == "size_mismatch"
    codec.receive(0, states[0], got[0], out)
    assert states[0].step == 1 and not bool((out == 7.0).any())
    # Slots of an earlier step are refused.
    codec.encode(0, grads[0], states[0], send)
    with pytest.raises(gradcomp.Error) as e:
        codec.receive(0, states[0], got[0], out)
    assert e.value.code == "codec_mismatch" and "step" in str(e.value)
    # Non-finite gradients, where the codec refuses them.
    strict = gradcomp.Sharded("int8", mode="reduce_scatter", chunk_bytes=4096, allow_non_finite=False)
    with pytest.raises(gradcomp.Error) as e:
        strict.encode(0, torch.full((n,), float("nan")), strict.make_state(n, world, 0), send)
    assert e.value.code == "non_finite_value"


def test_checkpoints_resume_exactly_and_restore_elastic():
    n = 12_345
    codec = gradcomp.Sharded("topk", density=0.05)
    states = [codec.make_state(n, 4, r) for r in range(4)]
    for step in range(3):
        dist_util.simulate_sharded(codec, states, _grads(n, 4, step))
    blobs = [codec.checkpoint(st) for st in states]
    assert len(blobs[3]) < len(blobs[0])  # the last shard (and its owner state) is shorter
    # Exact: a restored state continues with the same bytes.
    again = [codec.make_state(n, 4, r) for r in range(4)]
    for st, b in zip(again, blobs):
        codec.load_checkpoint(st, b)
    assert [st.step for st in again] == [3] * 4
    g = _grads(n, 4, 9)
    a, b = dist_util.simulate_sharded(codec, states, g), dist_util.simulate_sharded(codec, again, g)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    bad = bytearray(blobs[1])
    bad[200] ^= 1
    with pytest.raises(gradcomp.Error) as e:
        codec.load_checkpoint(codec.make_state(n, 4, 1), bytes(bad))
    assert e.value.code == "checksum_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        codec.load_checkpoint(codec.make_state(n, 4, 2), blobs[1])  # another rank
    assert e.value.code == "size_mismatch"
    with pytest.raises(gradcomp.Error) as e:
        gradcomp.Sharded("topk", density=0.05, mode="reduce_scatter").load_checkpoint(
            gradcomp.Sharded("topk", density=0.05, mode="reduce_scatter").make_state(n, 4, 1), blobs[1])
    assert e.value.code == "codec_mismatch"

    # Elastic, 4 -> 3: what error feedback owes (every sender residual and every owner residual,
    # laid on the whole gradient) keeps its sum over ranks; each new rank holds it on its own
    # shard only.
    def owed(sts, world):
        total = np.zeros(n, dtype=np.float64)
        for st in sts:
            for j in range(world):
                off, count = shard(n, world, j)
                total[off:off + count] += np.asarray(st.sender_residual(j))
            off, count = st.shard
            total[off:off + count] += np.asarray(st.owner_residual)
        return total

    def shard(n, world, j):
        size = -(-n // world)
        return min(n, j * size), min(n, (j + 1) * size) - min(n, j * size)

    saved = [codec.make_state(n, 4, r) for r in range(4)]
    for st, b in zip(saved, blobs):
        codec.load_checkpoint(st, b)
    before = owed(saved, 4)
    new = [codec.make_state(n, 3, r) for r in range(3)]
    for st in new:
        codec.restore_elastic(st, blobs[::-1])  # any order
    # (the saved senders' residuals are added in fp32: equal up to its rounding)
    assert np.allclose(owed(new, 3), before, rtol=0, atol=1e-5) and float(np.abs(before).sum()) > 0
    for st in new:
        for j in range(3):
            if j != st.rank:
                assert float(np.abs(np.asarray(st.sender_residual(j))).sum()) == 0.0
    assert all(st.step == 3 for st in new)
    outs = dist_util.simulate_sharded(codec, new, _grads(n, 3, 11))  # and the run goes on
    assert all(torch.equal(o, outs[0]) for o in outs)
    with pytest.raises(gradcomp.Error):
        codec.restore_elastic(codec.make_state(n, 3, 0), blobs[:3])  # a saved rank missing


# --- On every device: the CPU, and cuda:0 (marked gpu) against the CPU's bytes ---------------

NT = 100_005  # odd, a multiple of 3 and 5: every shard of W = 1, 3, 5 has NT / W elements
SPARSE = ("topk", "topk_fp32", "topk_int8")


def _sharded_step(codec, states, grads, out_dtype):
    """One step of len(states) simulated ranks of a gradcomp.Sharded codec on the grads' device:
    the all-to-all and all-gather by slicing. Returns each rank's sends and outputs."""
    world, dev = len(states), grads[0].device
    p0 = codec.describe(0, states[0])
    slot = p0["slot_bytes"]
    sends = []
    for g, st in zip(grads, states):
        buf = torch.empty(p0["send_bytes"], dtype=torch.uint8, device=dev)
        codec.encode(0, g, st, buf)
        sends.append(buf)
    outs = []
    for j, st in enumerate(states):
        recv = torch.cat([sends[r].view(world, slot)[j] for r in range(world)])
        if codec.mode == "reduce_scatter":
            out = torch.full((st.shard[1],), 7.0, dtype=out_dtype, device=dev)
            codec.receive(0, st, recv, out)
            outs.append(out)
        else:
            codec.receive(0, st, recv)
    if codec.mode == "all_reduce":
        p1 = codec.describe(1, states[0])
        gathered = []
        for st in states:
            buf = torch.empty(p1["send_bytes"], dtype=torch.uint8, device=dev)
            codec.encode(1, None, st, buf)
            gathered.append(buf)
            sends.append(buf)
        every = torch.cat(gathered)
        for st in states:
            out = torch.full((st.size,), 7.0, dtype=out_dtype, device=dev)
            codec.receive(1, st, every, out)
            outs.append(out)
    return sends, outs


@pytest.mark.parametrize("mode", ["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("name", ["int8", "topk", "bf16", "int4"])
def test_sharded_equals_the_cpu(name, mode, device):
    """The sharded path with the device's states: the CPU's slot bytes, outputs, residuals and
    checkpoints, at 1 and 3 ranks, float32 and bfloat16 gradients."""
    opts = {"density": 0.01, "compact_indices": False} if name in SPARSE else {}
    bits, host = dist_util.bits, dist_util.host
    for world in (1, 3):
        for dtype in (torch.float32, torch.bfloat16):
            codec = gradcomp.Sharded(name, mode, **opts)
            s_cpu = [codec.make_state(NT, world, r, dtype) for r in range(world)]
            s_dev = [codec.make_state(NT, world, r, dtype, device) for r in range(world)]
            g = torch.Generator().manual_seed(world)
            for step in range(3):
                grads = [(torch.randn(NT, generator=g) * 10.0 ** (step - 1)).to(dtype) for _ in range(world)]
                b_cpu, o_cpu = _sharded_step(codec, s_cpu, grads, dtype)
                b_dev, o_dev = _sharded_step(codec, s_dev, [x.to(device) for x in grads], dtype)
                for a, b in zip(b_dev, b_cpu):
                    assert torch.equal(a.cpu(), b), (name, mode, world, dtype, step)
                for a, b in zip(o_dev, o_cpu):
                    assert np.array_equal(bits(a), bits(b)), (name, mode, world, dtype, step)
                for a, b in zip(s_dev, s_cpu):
                    assert a.step == b.step and a.stage == b.stage
                    for j in range(world):
                        assert np.array_equal(host(a.sender_residual(j)), np.asarray(b.sender_residual(j)))
                    assert np.array_equal(host(a.owner_residual), np.asarray(b.owner_residual))
                    assert codec.checkpoint(a) == codec.checkpoint(b)
            codec.check()
            moved = codec.make_state(NT, world, 0, dtype, device)
            codec.load_checkpoint(moved, codec.checkpoint(s_cpu[0]))
            assert moved.step == 3 and codec.checkpoint(moved) == codec.checkpoint(s_cpu[0])


def test_sharded_bad_slot_raises_at_the_next_check(device):
    """A received slot with a flipped payload byte: the CPU raises at receive(0); on a device the
    call writes nothing and check() raises the CPU's code."""
    codec = gradcomp.Sharded("int8", "reduce_scatter")
    grads = [torch.randn(NT, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    codes = []
    for on in ("cpu", device):
        states = [codec.make_state(NT, 2, r, None, None if on == "cpu" else on) for r in range(2)]
        p0 = codec.describe(0, states[0])
        sends = []
        for g, st in zip(grads, states):
            buf = torch.empty(p0["send_bytes"], dtype=torch.uint8, device=on)
            codec.encode(0, g.to(on), st, buf)
            sends.append(buf.view(2, -1))
        recv = torch.cat([sends[0][0], sends[1][0]])
        recv[p0["slot_bytes"] + 40] ^= 0x10
        out = torch.full((states[0].shard[1],), 7.0, device=on)
        codes.append(dist_util.raised(on, lambda: codec.receive(0, states[0], recv, out), codec.check).code)
        codec.check()  # cleared
        assert torch.equal(out.cpu(), torch.full((states[0].shard[1],), 7.0))
    assert codes[1] == codes[0]
