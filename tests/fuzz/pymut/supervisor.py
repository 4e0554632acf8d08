"""The parent: worker processes, watched for crashes, hangs and memory."""

from __future__ import annotations

import atexit
import collections
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

from .execution import Recorder, Stats, _slug, save_reproducer
from .target import Target
from .targets import _scratch


ENTRY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python_mutation.py")

class Worker:
    def __init__(self, name: str, args, first: int, runs: Optional[int], seconds: Optional[float], stats: Stats,
                 tmp: str) -> None:
        self.name, self.args, self.first, self.stats = name, args, first, stats
        self.runs, self.seconds = runs, seconds
        self.shm = os.path.join(tmp, _slug(name) + ".shm")
        with open(self.shm, "wb") as f:
            f.truncate(Recorder.SIZE)
        self.log = os.path.join(tmp, _slug(name) + ".log")
        cmd = [sys.executable, ENTRY, "--worker", name, "--seed", str(args.seed),
               "--first", str(first), "--shm", self.shm, "--crash-dir", args.crash_dir]
        if runs is not None:
            cmd += ["--runs", str(runs)]
        if seconds is not None:
            cmd += ["--seconds", f"{seconds:.3f}"]
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.logf)
        self.started = time.monotonic()
        self.last_i, self.last_change = (0, 0), time.monotonic()

    def log_text(self) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def run_workers(targets: List[Target], args) -> List[Stats]:
    tmp = tempfile.mkdtemp(prefix="gradcomp-pyfuzz-", dir=_scratch())
    atexit.register(shutil.rmtree, tmp, True)
    os.environ["GRADCOMP_PYFUZZ_TMP"] = tmp  # the workers' scratch files go there too
    pending = [t.name for t in targets]
    results = {name: Stats(name) for name in pending}
    budget = {name: (args.runs, args.seconds) for name in pending}
    crashes = collections.Counter()
    running: List[Worker] = []

    def start(name: str, first: int) -> None:
        runs, seconds = budget[name]
        running.append(Worker(name, args, first, runs, seconds, results[name], tmp))

    def finish(w: Worker, kind: Optional[str], detail: str) -> None:
        """A worker ended: normally (kind None) or by a crash, hang or memory limit."""
        running.remove(w)
        w.logf.close()
        state, i, counts, blobs = Recorder.read(w.shm)
        done = counts or {"executions": 0, "successes": 0, "errors": {}, "violations": [], "seconds": 0.0,
                          "next": w.first}
        nxt = done.pop("next", w.first)
        if kind is None:
            w.stats.add(done)
            print(f"-- {w.name}: {w.stats.executions} executions in {w.stats.seconds:.0f}s, "
                  f"{len(w.stats.violations)} violation(s)", flush=True)
            return
        if state == 0:  # died or stuck while building its inputs: a setup failure, not a finding
            w.stats.violations.append({"iteration": -1, "kind": "setup failed", "detail": detail + "\n" + w.log_text()[-2000:]})
            print(f"-- {w.name}: setup failed ({detail}); see the report", flush=True)
            return
        # Executions nxt .. i ran (i crashed); their outcomes before i are not known.
        done["executions"] += i + 1 - nxt
        done["unrecorded"] = i - nxt
        done["seconds"] = time.monotonic() - w.started
        w.stats.add(done)
        path = save_reproducer(args.crash_dir, w.name, args.seed, i, kind, detail, blobs, None, w.log_text())
        w.stats.violations.append({"iteration": i, "kind": kind, "detail": detail, "file": path})
        print(f"-- {w.name}: {kind} at execution {i} ({detail}): {path}", flush=True)
        crashes[w.name] += 1
        runs, seconds = budget[w.name]
        runs = None if runs is None else runs - (i + 1 - w.first)
        seconds = None if seconds is None else seconds - (time.monotonic() - w.started)
        budget[w.name] = (runs, seconds)
        if crashes[w.name] < 20 and (runs is None or runs > 0) and (seconds is None or seconds > 0):
            start(w.name, i + 1)

    try:
        watch(pending, running, start, finish, args)
    finally:  # stopped (a signal, an error): no worker outlives the parent
        for w in running:
            w.proc.kill()
            w.proc.wait()
    return [results[t.name] for t in targets]


def watch(pending: List[str], running: List["Worker"], start, finish, args) -> None:
    while pending or running:
        while pending and len(running) < args.jobs:
            start(pending.pop(0), 0)
        time.sleep(0.2)
        for w in list(running):
            rc = w.proc.poll()
            if rc is not None:
                state = Recorder.read(w.shm)[0]
                if rc == 0 and state == 2:
                    finish(w, None, "")
                else:
                    why = f"exit status {rc}"
                    if rc < 0:
                        try:
                            why = f"signal {-rc} ({signal.Signals(-rc).name})"
                        except ValueError:
                            why = f"signal {-rc}"
                    finish(w, "crash", f"the worker died: {why}")
                continue
            with open(w.shm, "rb") as f:
                state, i = struct.unpack("<QQ", f.read(16))
            now = time.monotonic()
            if (state, i) != w.last_i:
                w.last_i, w.last_change = (state, i), now
            limit = args.timeout if state == 1 else max(600.0, args.timeout)
            if now - w.last_change > limit:
                w.proc.kill()
                w.proc.wait()
                finish(w, "timeout", f"no progress for {limit:.0f} s (killed)")
            elif args.rss_limit_mb and _rss_mb(w.proc.pid) > args.rss_limit_mb:
                w.proc.kill()
                w.proc.wait()
                finish(w, "oom", f"resident size above {args.rss_limit_mb} MB (killed)")
