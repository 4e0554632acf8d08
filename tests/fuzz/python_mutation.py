#!/usr/bin/env python3
"""Byte-mutation fuzzing of gradcomp's Python entry points.

The libFuzzer targets in tests/fuzz drive the C++ decoders directly; this harness drives them
through the Python bindings (and gradcomp.restart's file checks), where the arrays, the
exception translation and the argument checks sit on top. For every entry point that decodes
bytes it makes valid inputs first (real frames, slots, reduced buffers, checkpoints, files),
then, per execution, mutates one with a seeded RNG and calls the entry point:

* mutations, one to six stacked: bit flips; a byte, or a run of bytes, set to 0, 0xff or
  random; truncation; extension (zeros, 0xff, random bytes, the input doubled); a chunk
  erased, inserted, or duplicated; splices with a second valid input (a prefix of one and a
  suffix of the other, or a chunk of one written over the other); edits of the format's length
  and count fields (frame headers, slot heads, checkpoint headers and records, the restart
  file header: +-1, +-small, 0, all ones, doubled, the input's length, powers of two); edits of
  an aligned 4- or 8-byte word. Half the mutated inputs are re-sealed: their CRC32Cs (of each
  frame whose header parses, of a checkpoint, of nested checkpoints, of a restart file's
  header) recomputed, so that mutations reach the checks behind the checksum. Some executions
  also change the call's other arguments (the output's type and size, ``slot_bytes``, which
  rank restores, whether a phase buffer is the whole buffer or this rank's shard, the list of
  saved checkpoints).
* the property: the call returns, or raises ``gradcomp.Error`` with a known ``.code`` (the
  restart files: ``gradcomp.restart.CheckpointError``; a phase buffer whose byte length is not
  a whole number of elements, passed as a byte tensor: the documented ``TypeError``); it never
  raises anything else, never crashes the interpreter, never hangs; the input is never
  written; and when it raises, the output tensor and the state are exactly as they were
  (output bits compared with a copy; states by their checkpoint bytes, step, stage and
  residuals).

Usage:
  python tests/fuzz/python_mutation.py [--runs N] [--seconds S] [--seed S] [-j JOBS] [--out FILE]
      [--crash-dir DIR] [--timeout S] [--rss-limit-mb MB] [--in-process] [ENTRY ...]
  python tests/fuzz/python_mutation.py --list
  python tests/fuzz/python_mutation.py --replay DIR/<entry>-it<i>.json

  --runs N        executions per entry point (default 10,000,000; unlimited when only
                  --seconds is given)
  --seconds S     a time limit per entry point (on top of --runs when both are given)
  --seed S        the campaign's seed (default 1): execution i of entry point E mutates with
                  an RNG seeded from (S, E, i), so any execution can be replayed alone
  -j JOBS         entry points fuzzed at once, each in a worker process (default 1)
  --out FILE      also write the Markdown report there
  --crash-dir DIR where reproducers go (default build/fuzz-python-crashes)
  --timeout S     a call that takes longer is a hang (default 10)
  --rss-limit-mb  a worker above this resident size is out of memory (default 4096)
  --in-process    no worker processes (a crash ends the run without a reproducer)
  ENTRY           only these entry points (shell patterns on the names --list prints)

Each entry point runs in a worker process that records, before each call, the execution's
number and its input in a shared file; the parent watches it: a worker that dies (a crash), stops
advancing for --timeout seconds (a hang, killed) or grows past the memory limit (killed) leaves
its input in --crash-dir (<entry>-it<i>.bin and .json: seed, execution, violation, the input in
hex), and fuzzing goes on in a new worker from the next execution. A wrong exception, a written
input or an output changed on error is found in the worker, which saves the input the same way
and goes on. After a worker dies, the outcomes of at most the last 63 executions before it
are missing from the split (successes, errors), not from the executions.

Exit status: 0, 1 on any property violation, 2 on a usage or setup error.

The harness is the package tests/fuzz/pymut, this file its command line: formats.py (CRC
re-sealing, length and count fields), mutator.py, target.py (the entry points' base),
compressor_targets.py, sharded_targets.py, phase_targets.py and targets.py (the entry points
and their list), execution.py (one execution, the record the parent watches, reproducers),
supervisor.py (the worker processes) and report.py.

Standard library, torch and gradcomp only; python/tests/test_fuzz_smoke.py runs every entry
point briefly in-process; tests/fuzz/campaign.sh --python PY runs it with the campaign's RUNS.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Optional, Sequence

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the harness's package, pymut

from pymut.common import DEFAULT_RUNS  # noqa: E402
from pymut import execution  # noqa: E402
from pymut.execution import Recorder, fuzz, iteration_rng  # noqa: E402,F401
from pymut.report import report  # noqa: E402
from pymut.supervisor import run_workers  # noqa: E402
from pymut.targets import SelfTest, all_targets, entry_names, select  # noqa: E402,F401


def replay(path: str) -> int:
    """Runs a reproducer (--replay) among this module's all_targets()."""
    return execution.replay(path, all_targets())


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(usage=argparse.SUPPRESS, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("entries", nargs="*", metavar="ENTRY")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--crash-dir", default=None)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--rss-limit-mb", type=float, default=4096.0)
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--replay")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shm", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.list:
        print("\n".join(entry_names()))
        return 0
    if args.replay:
        return replay(args.replay)
    if args.worker:
        import faulthandler

        faulthandler.enable()  # a crash's traceback goes to the log the parent keeps
        (t,) = [x for x in all_targets() if x.name == args.worker]
        rec = Recorder(args.shm)
        fuzz(t, args.seed, args.first, args.runs, args.seconds, args.crash_dir, rec)
        rec.state(2)
        return 0
    if (args.runs is not None and args.runs < 1) or (args.seconds is not None and args.seconds <= 0) or args.jobs < 1:
        print("error: --runs, --seconds and -j must be positive", file=sys.stderr)
        return 2
    if args.runs is None and args.seconds is None:
        args.runs = DEFAULT_RUNS
    if args.crash_dir is None:
        args.crash_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                                      "fuzz-python-crashes")
    args.crash_dir = os.path.abspath(args.crash_dir)
    try:
        targets = select(args.entries)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # atexit and the workers' cleanup run
    started = time.monotonic()
    if args.in_process:
        results = []
        for t in targets:
            s = fuzz(t, args.seed, 0, args.runs, args.seconds, args.crash_dir)
            print(f"-- {t.name}: {s.executions} executions in {s.seconds:.0f}s, {len(s.violations)} violation(s)",
                  flush=True)
            results.append(s)
    else:
        results = run_workers(targets, args)
    text = report(results, args, time.monotonic() - started)
    print()
    print(text, end="")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    if any(v["kind"] == "setup failed" for s in results for v in s.violations):
        return 2
    return 1 if any(s.violations for s in results) else 0


if __name__ == "__main__":
    sys.exit(main())
