"""The Markdown report."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from typing import List

import torch

import gradcomp

from .execution import Stats


def _commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return (rev or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def report(results: List[Stats], args, seconds: float) -> str:
    asked = []
    if args.runs is not None:
        asked.append(f"{args.runs:,} executions")
    if args.seconds is not None:
        asked.append(f"{args.seconds:g} s")
    lines = [
        "# gradcomp Python entry points: byte-mutation fuzzing",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; commit {_commit()}; "
        f"host {platform.node()} ({os.cpu_count()} CPUs); Python {platform.python_version()}, torch {torch.__version__}, "
        f"gradcomp {gradcomp.__version__} ({os.path.dirname(gradcomp.__file__)})",
        f"- {' or '.join(asked)} asked per entry point; seed {args.seed}; "
        f"{'in-process' if args.in_process else f'{args.jobs} worker process(es)'}; {seconds:.0f} s in all",
        "- errors: the gradcomp.Error codes (and documented TypeErrors) the calls raised; a violation is any other "
        "exception, a crash, a hang, a written input, or an output or state changed by a call that raised",
        "",
        "| entry point | executions | executions/s | successes | errors by code | property violations |",
        "|---|---:|---:|---:|---|---:|",
    ]
    total = Stats("all")
    for s in results:
        rate = s.executions / s.seconds if s.seconds > 0 else 0.0
        errors = ", ".join(f"{k} {v:,}" for k, v in sorted(s.errors.items(), key=lambda kv: -kv[1])) or "-"
        if s.unrecorded:
            errors += f" (+{s.unrecorded:,} unrecorded)"
        lines.append(f"| {s.name} | {s.executions:,} | {rate:,.0f} | {s.successes:,} | {errors} | {len(s.violations)} |")
        total.add(s.as_dict())
    lines.append(f"| all | {total.executions:,} | | {total.successes:,} | | {len(total.violations)} |")
    lines.append("")
    if total.violations:
        lines += ["## Violations", ""]
        for s in results:
            for v in s.violations:
                where = f" `{v['file']}`" if v.get("file") else ""
                lines.append(f"- {s.name}, execution {v['iteration']}: {v['kind']}: {v['detail'][:300]}{where}")
    else:
        lines.append("No property violations.")
    return "\n".join(lines) + "\n"
