"""Entry points of gradcomp.Compressor and its states."""

from __future__ import annotations

import random
import struct
from typing import Dict

import torch

import gradcomp

from .formats import _align8
from .target import OutputMixin, Target, _bits, _bytes, _grad, _outs


N = 1024  # Compressor targets: 4 chunks (chunk_bytes 1024) of 256 values
CODECS = [("topk", {"density": 0.1}), ("int8", {}), ("qsgd", {}), ("threshold", {"density": 0.1}),
          ("acctfm", {"cols": 64, "density": 0.1}), ("bf16", {})]


def _label(codec: str, opts: dict) -> str:
    extra = "".join(f",{k}={v}" for k, v in opts.items() if k == "cols")
    return f"{codec}{extra}"


class CompressorFixture:
    """Payloads of one codec: float32 gradients at steps 0 and 1, a bfloat16 one; the state
    checkpoints after steps 1 and 2."""

    def __init__(self, codec: str, opts: dict) -> None:
        self.codec = gradcomp.Compressor(codec, chunk_bytes=1024, **opts)
        c = self.codec
        st = c.make_state(N)

        def payload(g, state):
            out = torch.empty(c.max_payload_bytes(N, g.dtype), dtype=torch.uint8)
            return _bytes(out[:c.compress(g, state, out)])

        a = payload(_grad(1, N), st)
        self.checkpoint_1 = st.checkpoint()
        b = payload(_grad(2, N), st)
        self.checkpoint_2 = st.checkpoint()
        c16 = payload(_grad(3, N, torch.bfloat16), c.make_state(N))
        self.payloads = [a, b, c16]
        self.slot = max(c.max_payload_bytes(N), c.max_payload_bytes(N, torch.bfloat16))


_compressor_fixtures: Dict[str, CompressorFixture] = {}


def _compressor_fixture(codec: str, opts: dict) -> CompressorFixture:
    key = _label(codec, opts)
    if key not in _compressor_fixtures:
        _compressor_fixtures[key] = CompressorFixture(codec, opts)
    return _compressor_fixtures[key]


class CodecTarget(Target):
    """An entry point of one Compressor codec: ``entry`` names it (``{}`` stands for the codec
    and its options); :meth:`fixture` gives the codec's valid inputs."""

    def __init__(self, codec: str, opts: dict, entry: str) -> None:
        self.codec_name, self.opts = codec, opts
        self.name = entry.format(_label(codec, opts))
        super().__init__()

    def fixture(self) -> CompressorFixture:
        f = _compressor_fixture(self.codec_name, self.opts)
        self.c = f.codec
        return f


class CompressorDecode(OutputMixin, CodecTarget):
    """Compressor(codec).decompress / accumulate / accumulate_gathered."""

    def __init__(self, codec: str, opts: dict, method: str) -> None:
        self.method = method
        self.kind = "gathered" if method == "accumulate_gathered" else "frames"
        super().__init__(codec, opts, "Compressor({})." + method)

    def build(self) -> None:
        f = self.fixture()
        self.outs = _outs(N, 100)
        a, b, c16 = f.payloads
        if self.method == "accumulate_gathered":
            self.slot_bytes = f.slot
            pad = lambda p, fill: p + (bytes(f.slot - len(p)) if fill is None else  # noqa: E731
                                       random.Random(fill).randbytes(f.slot - len(p)))
            self.good = {"packed": [a + b + c16, c16 + a + b],
                         "slots": [pad(a, None) + pad(b, None) + pad(c16, None), pad(c16, 1) + pad(a, 2) + pad(b, 3)]}
        else:
            self.good = {"packed": [a, b, c16]}

    def params(self, rng):
        p: dict = {}
        self.pick_out(rng, p)
        if self.method == "accumulate_gathered":
            p["mode"] = "slots" if rng.randrange(2) else "packed"
            s = self.slot_bytes if p["mode"] == "slots" else 0
            if rng.randrange(16) == 0:  # another slot size
                s = rng.choice((s + 1, s - 1, s + 8, s - 8, 0, 1, 3 * self.slot_bytes, 1 << 63, (1 << 64) - 1, 88))
            p["slot_bytes"] = max(0, s)
        else:
            p["mode"] = "packed"
        return p

    def valid(self, p):
        return self.good[p["mode"]]

    def slot(self, p):
        return self.slot_bytes if p["mode"] == "slots" else 0

    def call(self, blobs, p):
        payload, out = self.arg(blobs[0]), self.out_of(p)
        if self.method == "decompress":
            self.c.decompress(payload, out)
        elif self.method == "accumulate":
            self.c.accumulate(payload, out)
        else:
            self.c.accumulate_gathered(payload, out, p["slot_bytes"])

    def untouched(self, p):
        return self.out_untouched(p)

    def reset(self, p):
        self.out_reset(p)


class CompressorMany(CodecTarget):
    """Compressor(codec).accumulate_many: three ranks' blocks, two outputs, the sizes in each
    block's head (all or nothing on the CPU)."""

    kind = "blocks"

    def __init__(self, codec: str, opts: dict) -> None:
        super().__init__(codec, opts, "Compressor({}).accumulate_many")

    def build(self) -> None:
        f = self.fixture()
        self.half = _align8(f.slot)
        self.block = 8 + 2 * self.half

        def block(p0, p1):
            b = struct.pack("<II", len(p0), len(p1)) + p0 + bytes(self.half - len(p0)) + p1 + bytes(self.half - len(p1))
            return b

        a, b, c16 = f.payloads
        self.good = [block(a, b) + block(b, a) + block(a, c16), block(c16, a) + block(b, b) + block(a, b)]
        self.refs = [_grad(200, N), _grad(201, N)]
        self.outs = [r.clone() for r in self.refs]

    def params(self, rng):
        block = self.block
        if rng.randrange(16) == 0:  # another block size
            block = rng.choice((block + 8, block - 8, 8, 16, 3 * block, 1 << 63, (1 << 64) - 1))
        return {"block": block}

    def valid(self, p):
        return self.good

    def slot(self, p):
        return self.block

    def call(self, blobs, p):
        self.c.accumulate_many(self.arg(blobs[0]), p["block"], self.outs, [8, 8 + self.half])

    def untouched(self, p):
        for out, ref in zip(self.outs, self.refs):
            if not torch.equal(_bits(out), _bits(ref)):
                return "an output was written"
        return None

    def reset(self, p):
        for out, ref in zip(self.outs, self.refs):
            out.copy_(ref)


class StateRestore(CodecTarget):
    """State.restore of a codec's checkpoint, into a fresh state of the same codec and size."""

    kind = "gcst"

    def __init__(self, codec: str, opts: dict) -> None:
        super().__init__(codec, opts, "State({}).restore")

    def build(self) -> None:
        f = self.fixture()
        self.good = [f.checkpoint_2, f.checkpoint_1]
        self.reset({})

    def valid(self, p):
        return self.good

    def call(self, blobs, p):
        self.state.restore(bytes(blobs[0]))

    def untouched(self, p):
        if self.state.checkpoint() != self.ref:
            return f"the state changed (step {self.state.step})"
        return None

    def reset(self, p):
        self.state = self.c.make_state(N)
        self.ref = self.state.checkpoint()
