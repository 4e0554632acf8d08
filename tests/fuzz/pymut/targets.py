"""gradcomp.restart's checkpoint files, the harness's own check, and the list of entry points."""

from __future__ import annotations

import atexit
import fnmatch
import os
import shutil
import tempfile
import time
from typing import List, Optional, Sequence

import torch

import gradcomp

from .common import Violation
from .compressor_targets import CODECS, CompressorDecode, CompressorMany, StateRestore
from .phase_targets import PhaseReceive, TagcRestore
from .sharded_targets import ShardedReceive, ShardedRestore
from .target import OutputMixin, Target, _outs


class RestartFile(Target):
    """gradcomp.restart.verify / load of a checkpoint file (Checkpointer.save's, of a small
    model, steps 1 and 2), mutated, written under the step-1 file's name."""

    kind = "restart"

    def __init__(self, fn: str) -> None:
        self.fn = fn
        self.name = f"restart.{fn}"
        super().__init__()

    def build(self) -> None:
        import gradcomp.restart as restart

        self.restart = restart
        self.dir = tempfile.mkdtemp(prefix="gradcomp-pyfuzz-", dir=_scratch())
        atexit.register(shutil.rmtree, self.dir, True)
        torch.manual_seed(5)
        model = torch.nn.Linear(4, 4)
        ckpt = restart.Checkpointer(os.path.join(self.dir, "made"), {"model": model}, every=1, keep=None, rng=False)
        first = ckpt.save(1)
        with torch.no_grad():
            model.weight.add_(1.0)
        second = ckpt.save(2)
        self.good = []
        for path in (first, second):
            with open(path, "rb") as f:
                self.good.append(f.read())
        self.payloads = {g[48:] for g in self.good}
        self.path = os.path.join(self.dir, restart.file_name(1, 0, 1))

    def valid(self, p):
        return self.good

    def may_reseal(self, b, p):
        # verify: always. load: only a header change (a re-sealed payload change is tampering, which
        # the CRC does not claim to find; torch.load would then parse arbitrary bytes).
        return self.fn == "verify" or bytes(b[48:]) in self.payloads

    def allowed(self, p, blobs):
        return (self.restart.CheckpointError,)

    def call(self, blobs, p):
        with open(self.path, "wb") as f:
            f.write(blobs[0])
        got = getattr(self.restart, self.fn)(self.path)
        if self.fn == "load" and not (isinstance(got, dict) and got.get("format") == 1):
            raise Violation("wrong result", f"load returned {type(got).__name__} without format 1")


# --- The harness's own check: an entry point that misbehaves on purpose.

class SelfTest(OutputMixin, Target):
    """Not gradcomp: a fake entry point that, about once in `every` executions each, does one of
    the things the harness must report (``kinds``: "crash" (os.abort), "hang", "exception" (a
    KeyError), "modified" (writes its output, then raises gradcomp.Error), "input" (writes its
    input), "code" (a gradcomp.Error without a known code)); otherwise it succeeds or raises
    gradcomp.Error("truncated"). Listed when GRADCOMP_PYFUZZ_SELFTEST names the kinds
    (comma-separated); python/tests/test_fuzz_smoke.py uses it directly."""

    kind = "frames"

    def __init__(self, kinds: Sequence[str], every: int = 50) -> None:
        self.kinds, self.every = [k for k in kinds if k], every
        self.name = "selftest(" + ",".join(self.kinds) + ")"
        super().__init__()

    def build(self) -> None:
        self.good = [bytes(range(64)), bytes(64)]
        self.outs = _outs(16, 500, sizes=(0,))

    def params(self, rng):
        x = rng.randrange(self.every * max(1, len(self.kinds)))
        return {"dtype": "f32", "size": 0, "act": self.kinds[x] if x < len(self.kinds) else "normal"}

    def valid(self, p):
        return self.good

    def call(self, blobs, p):
        act, payload, out = p["act"], self.arg(blobs[0]), self.out_of(p)
        if act == "crash":
            os.abort()
        if act == "hang":
            time.sleep(3600)
        if act == "exception":
            raise KeyError("selftest")
        if act == "input" and payload.numel():
            payload[0] ^= 1
            return
        if act in ("modified", "code") or len(blobs[0]) % 2:
            if act == "modified":
                out[0] += 1
            e = gradcomp.Error("selftest")
            e.code = "no_such_code" if act == "code" else "truncated"
            raise e
        out.fill_(0.0)

    def untouched(self, p):
        return self.out_untouched(p)

    def reset(self, p):
        self.out_reset(p)


def _scratch() -> Optional[str]:
    """Where temporary files go: the parent's folder (which it removes, also after a worker
    crashed), else /dev/shm where writable."""
    if os.environ.get("GRADCOMP_PYFUZZ_TMP"):
        return os.environ["GRADCOMP_PYFUZZ_TMP"]
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


# --- The list.

def all_targets() -> List[Target]:
    out: List[Target] = []
    for codec, opts in CODECS:
        for method in ("decompress", "accumulate", "accumulate_gathered"):
            out.append(CompressorDecode(codec, opts, method))
    for codec, opts in CODECS:
        out.append(CompressorMany(codec, opts))
    for codec, opts in CODECS:
        out.append(StateRestore(codec, opts))
    topk = {"density": 0.2}
    out += [ShardedReceive("topk_int8", "all_reduce", topk, 0), ShardedReceive("topk_int8", "all_reduce", topk, 1),
            ShardedReceive("int8", "reduce_scatter", {}, 0),
            ShardedRestore("topk_int8", topk, False), ShardedRestore("topk_int8", topk, True)]
    sum_safe = {"bitmap": "sum_safe", "cells": "fp32"}
    out += [PhaseReceive("", {}, 0), PhaseReceive("", {}, 1),
            PhaseReceive("bitmap=sum_safe,cells=fp32", sum_safe, 0), PhaseReceive("bitmap=sum_safe,cells=fp32", sum_safe, 1),
            TagcRestore(False), TagcRestore(True), PhaseReceive("", None, 0, cast="bf16"),
            RestartFile("verify"), RestartFile("load")]
    if os.environ.get("GRADCOMP_PYFUZZ_SELFTEST"):
        out.append(SelfTest(os.environ["GRADCOMP_PYFUZZ_SELFTEST"].split(",")))
    return out


def entry_names() -> List[str]:
    return [t.name for t in all_targets()]


def select(patterns: Sequence[str]) -> List[Target]:
    targets = all_targets()
    if not patterns:
        return targets
    picked = [t for t in targets if any(fnmatch.fnmatchcase(t.name, p) or p == t.name for p in patterns)]
    if not picked:
        raise SystemExit(f"error: no entry point matches {list(patterns)}; --list prints them")
    return picked
