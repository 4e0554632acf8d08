"""Executions: one seeded mutation and call, the shared record a watching parent reads,
reproducers, replay."""

from __future__ import annotations

import collections
import hashlib
import json
import mmap
import os
import random
import struct
import time
from typing import List, Optional, Tuple

import torch

import gradcomp

from .common import CODES, MAX_INPUT, RESTART_CODES, Violation
from .target import Target
from .targets import RestartFile, all_targets


def _base_seed(seed: int, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:6], "little")


def iteration_rng(seed: int, name: str, i: int) -> random.Random:
    return random.Random((_base_seed(seed, name) << 40) + i)


class Stats:
    def __init__(self, name: str) -> None:
        self.name = name
        self.executions = 0
        self.successes = 0
        self.errors: collections.Counter = collections.Counter()
        self.violations: List[dict] = []
        self.seconds = 0.0
        self.unrecorded = 0  # executions whose outcome a dead worker did not report

    def as_dict(self) -> dict:
        return {"name": self.name, "executions": self.executions, "successes": self.successes,
                "errors": dict(self.errors), "violations": self.violations, "seconds": self.seconds,
                "unrecorded": self.unrecorded}

    def add(self, d: dict) -> None:
        self.executions += d["executions"]
        self.successes += d["successes"]
        self.errors.update(d["errors"])
        self.violations += d["violations"]
        self.seconds += d["seconds"]
        self.unrecorded += d.get("unrecorded", 0)


def execute(t: Target, rng: random.Random, blobs_override: Optional[List[bytes]] = None):
    """One execution: returns (params, blobs, outcome); outcome is None (success), an error code
    (or exception name), or a Violation."""
    p = t.params(rng)
    blobs = t.make_input(rng, p)
    if blobs_override is not None:
        blobs = [bytearray(b) for b in blobs_override]
    return p, blobs, run_call(t, p, blobs)


def run_call(t: Target, p: dict, blobs: List[bytearray]):
    t.inputs = []
    copies = [bytes(b) for b in blobs]
    outcome = None
    try:
        t.call(blobs, p)
    except Violation as v:
        outcome = v
    except Exception as e:  # noqa: BLE001 -- anything but the allowed types is the finding
        if not isinstance(e, t.allowed(p, blobs)):
            outcome = Violation("exception", f"{type(e).__module__}.{type(e).__qualname__}: {e}")
        else:
            code = getattr(e, "code", None) if isinstance(e, gradcomp.Error) else type(e).__name__
            known = RESTART_CODES if isinstance(t, RestartFile) else CODES
            if isinstance(e, gradcomp.Error) and code not in known:
                outcome = Violation("unknown code", f"gradcomp.Error with code {code!r}: {e}")
            elif (why := t.untouched(p)) is not None:
                outcome = Violation("modified on error", f"{why} (the call raised {code}: {e})")
            else:
                outcome = code
    for (tensor, b) in t.inputs:
        if tensor.numel() and not torch.equal(tensor.view(torch.uint8).flatten(), torch.frombuffer(b, dtype=torch.uint8)):
            outcome = Violation("input written", "the call wrote its input tensor")
    if [bytes(b) for b in blobs] != copies:
        outcome = Violation("input written", "the call wrote its input bytes")
    t.inputs = []
    if not isinstance(outcome, str):  # a success or a violation: outputs and state fresh again
        t.reset(p)
    return outcome


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name).strip("_")


def save_reproducer(crash_dir: str, name: str, seed: int, i: int, kind: str, detail: str,
                    blobs: Optional[List[bytes]], params: Optional[dict] = None, log: str = "") -> str:
    os.makedirs(crash_dir, exist_ok=True)
    stem = os.path.join(crash_dir, f"{_slug(name)}-it{i}")
    if blobs is not None:
        for k, b in enumerate(blobs):
            with open(f"{stem}.{k}.bin" if len(blobs) > 1 else f"{stem}.bin", "wb") as f:
                f.write(b)
    record = {"entry": name, "seed": seed, "iteration": i, "violation": kind, "detail": detail,
              "params": params, "input_hex": None if blobs is None else [bytes(b).hex() for b in blobs],
              "replay": f"python tests/fuzz/python_mutation.py --replay {stem}.json"}
    if log:
        record["log_tail"] = log[-4000:]
    with open(f"{stem}.json", "w") as f:
        json.dump(record, f, indent=1)
    return f"{stem}.json"


class Recorder:
    """The worker's side of the shared file: before each call, the execution's number and its
    input; every 64 executions and after each violation, the counts so far."""

    # layout: u64 state (0 building, 1 running, 2 done) | u64 execution | u64 counts length |
    # counts JSON (COUNTS bytes) | u32 blob count, then u32 length and bytes per blob
    COUNTS = 1 << 18
    INPUT_AT = 24 + COUNTS
    SIZE = INPUT_AT + 8 * MAX_INPUT

    def __init__(self, path: Optional[str]) -> None:
        self.mm = None
        self.parent = os.getppid()
        if path:
            fd = os.open(path, os.O_RDWR)
            self.mm = mmap.mmap(fd, self.SIZE)
            os.close(fd)

    def orphaned(self) -> bool:
        """The parent is gone (killed with its campaign): the worker stops too."""
        return self.mm is not None and os.getppid() != self.parent

    def state(self, s: int) -> None:
        if self.mm is not None:
            struct.pack_into("<Q", self.mm, 0, s)

    def before(self, i: int, blobs: List[bytearray]) -> None:
        mm = self.mm
        if mm is None:
            return
        at = self.INPUT_AT
        struct.pack_into("<I", mm, at, len(blobs))
        at += 4
        for b in blobs:
            n = min(len(b), self.SIZE - at - 4)
            struct.pack_into("<I", mm, at, n)
            mm[at + 4:at + 4 + n] = b[:n]
            at += 4 + n
        struct.pack_into("<Q", mm, 8, i)

    def counts(self, stats: Stats, next_i: int) -> None:
        if self.mm is None:
            return
        d = stats.as_dict()
        d["next"] = next_i
        d["violations"] = [dict(v, detail=v["detail"][:200]) for v in d["violations"]]
        raw = json.dumps(d).encode()[:self.COUNTS]
        self.mm[24:24 + len(raw)] = raw
        struct.pack_into("<Q", self.mm, 16, len(raw))

    @classmethod
    def read(cls, path: str) -> Tuple[int, int, Optional[dict], List[bytes]]:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), cls.SIZE, access=mmap.ACCESS_READ)
        try:
            state, i, n = struct.unpack_from("<QQQ", mm, 0)
            counts = json.loads(bytes(mm[24:24 + n])) if n else None
            at = cls.INPUT_AT
            count = struct.unpack_from("<I", mm, at)[0]
            at += 4
            blobs = []
            for _ in range(min(count, 64)):
                k = struct.unpack_from("<I", mm, at)[0]
                blobs.append(bytes(mm[at + 4:at + 4 + k]))
                at += 4 + k
            return state, i, counts, blobs
        finally:
            mm.close()


def fuzz(t: Target, seed: int, first: int = 0, runs: Optional[int] = None, seconds: Optional[float] = None,
         crash_dir: Optional[str] = None, recorder: Optional[Recorder] = None,
         max_violations: int = 100) -> Stats:
    """Runs executions first, first + 1, ... of entry point t until `runs` or `seconds`."""
    recorder = recorder or Recorder(None)
    stats = Stats(t.name)
    recorder.state(0)
    t.ensure_built()
    recorder.state(1)
    start = time.monotonic()
    i = first
    end = None if runs is None else first + runs
    while end is None or i < end:
        if (i - first) % 64 == 0 and ((seconds is not None and time.monotonic() - start >= seconds)
                                      or recorder.orphaned()):
            break
        rng = iteration_rng(seed, t.name, i)
        p = t.params(rng)
        blobs = t.make_input(rng, p)
        recorder.before(i, blobs)
        outcome = run_call(t, p, blobs)
        stats.executions += 1
        if outcome is None:
            stats.successes += 1
        elif isinstance(outcome, str):
            stats.errors[outcome] += 1
        else:
            rec = {"iteration": i, "kind": outcome.kind, "detail": outcome.detail[:500]}
            if crash_dir:
                rec["file"] = save_reproducer(crash_dir, t.name, seed, i, outcome.kind, outcome.detail,
                                              [bytes(b) for b in blobs], p)
            stats.violations.append(rec)
            recorder.counts(stats, i + 1)
            if len(stats.violations) >= max_violations:
                i += 1
                break
        i += 1
        if (i - first) % 64 == 0:
            stats.seconds = time.monotonic() - start
            recorder.counts(stats, i)
    stats.seconds = time.monotonic() - start
    recorder.counts(stats, i)
    return stats


def replay(path: str, targets: Optional[List[Target]] = None) -> int:
    """Runs a reproducer's execution again (--replay) among ``targets`` (default: every entry
    point); 1 if it violates the property."""
    with open(path) as f:
        rec = json.load(f)
    (t,) = [x for x in (all_targets() if targets is None else targets) if x.name == rec["entry"]]
    t.ensure_built()
    rng = iteration_rng(rec["seed"], t.name, rec["iteration"])
    blobs = [bytes.fromhex(h) for h in rec["input_hex"]] if rec.get("input_hex") is not None else None
    p, got, outcome = execute(t, rng, blobs)
    print(f"{t.name}, execution {rec['iteration']} (seed {rec['seed']}), params {p}, "
          f"input {[len(b) for b in got]} bytes")
    if isinstance(outcome, Violation):
        print(f"VIOLATION {outcome.kind}: {outcome.detail}")
        return 1
    print("success" if outcome is None else f"raised the allowed error {outcome}")
    return 0
