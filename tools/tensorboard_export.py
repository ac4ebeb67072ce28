#!/usr/bin/env python3
"""Writes the metrics.jsonl of one or more runs as TensorBoard event files (with PyPI's tensorboardX).

usage: tools/tensorboard_export.py RUN_DIR [RUN_DIR ...] [--logdir DIR]

Without --logdir the events go into each RUN_DIR itself, so `tensorboard --logdir runs/` shows every run
under runs/ by its directory name; with --logdir they go to DIR/<name of RUN_DIR>/ (`tensorboard --logdir
DIR`). Exporting again replaces the files of the previous export (events.out.tfevents.*.mtf), not others.

Tags (the series of tools/plot_metrics.py; TensorBoard smooths them itself):
  loss/train, loss/eval, eval/perplexity, train/learning_rate, train/grad_norm,
  perf/tokens_per_s, perf/mfu_percent, perf/step_ms, perf/comm_percent
A series is written only where metrics.jsonl has it (loss/eval only for a run with eval records; eval
records are as in tools/plot_metrics.py). Wall times are the run's own: each record's step_ms summed over
its window, ending at metrics.jsonl's modification time, so TensorBoard's "relative" axis is training time.

Needs tensorboardX (`python3 -m pip install tensorboardX`, or tools/install-deps.sh --python), which is on
PyPI and not in Debian: the interpreter is python3 on PATH (a virtualenv or pyenv one), not Debian's.
"""
import argparse
import glob
import math
import os
import sys

from metrics_jsonl import finite, load  # tools/metrics_jsonl.py, beside this script

SUFFIX = ".mtf"  # our event files end so, and only those are replaced by the next export
# (tag, record key, scale) of train records
TRAIN_SERIES = (
    ("loss/train", "loss", 1.0),
    ("train/learning_rate", "lr", 1.0),
    ("train/grad_norm", "grad_norm", 1.0),
    ("perf/tokens_per_s", "tokens_per_s", 1.0),
    ("perf/mfu_percent", "mfu", 100.0),
    ("perf/step_ms", "step_ms", 1.0),
    ("perf/comm_percent", "comm_frac", 100.0),
)


def wall_times(path, train):
    """step -> wall time: the windows' step_ms summed, the last step at the file's modification time."""
    elapsed, previous, at = 0.0, 0, {}
    for r in train:
        step_ms = r.get("step_ms")
        if finite(step_ms):
            elapsed += step_ms / 1000.0 * max(r["step"] - previous, 0)
        previous = r["step"]
        at[r["step"]] = elapsed
    end = os.path.getmtime(path)
    return {step: end - elapsed + t for step, t in at.items()}


def export(path, run_dir, train, evals, target, SummaryWriter):
    os.makedirs(target, exist_ok=True)
    for old in glob.glob(os.path.join(target, "events.out.tfevents.*" + SUFFIX)):
        os.remove(old)
    times = wall_times(path, train)
    last_time = max(times.values()) if times else os.path.getmtime(path)

    def when(step):
        # An eval record has no step_ms: it is at the time of its step's train record, or just after the last.
        if step in times:
            return times[step]
        earlier = [s for s in times if s <= step]
        return times[max(earlier)] if earlier else last_time

    counts = {}
    writer = SummaryWriter(logdir=target, filename_suffix=SUFFIX)
    try:
        for tag, key, scale in TRAIN_SERIES:
            for r in train:
                if finite(r.get(key)):
                    writer.add_scalar(tag, r[key] * scale, global_step=int(r["step"]), walltime=times[r["step"]])
                    counts[tag] = counts.get(tag, 0) + 1
        for r in evals:
            loss = r.get("eval_loss", r.get("loss"))
            perplexity = r.get("eval_perplexity", r.get("perplexity"))
            if not finite(perplexity) and finite(loss) and loss < 700:
                perplexity = math.exp(loss)
            for tag, value in (("loss/eval", loss), ("eval/perplexity", perplexity)):
                if finite(value):
                    writer.add_scalar(tag, value, global_step=int(r["step"]), walltime=when(r["step"]))
                    counts[tag] = counts.get(tag, 0) + 1
    finally:
        writer.close()
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (or their metrics.jsonl)")
    parser.add_argument("--logdir", help="write to DIR/<run name>/ (default: into each RUN_DIR)")
    args = parser.parse_args()
    try:
        from tensorboardX import SummaryWriter
    except ImportError as e:
        # tools/install-deps.sh --python puts tensorboardX into the project's .venv: use it when this one lacks it.
        venv_python = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "bin", "python")
        if os.path.exists(venv_python) and os.path.realpath(sys.executable) != os.path.realpath(venv_python) \
                and not os.environ.get("MTF_EXPORT_REEXEC"):
            os.environ["MTF_EXPORT_REEXEC"] = "1"
            os.execv(venv_python, [venv_python, os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit(f"tensorboard_export: cannot import tensorboardX ({e}) with {sys.executable}; install it with "
                 "`python3 -m pip install tensorboardX` (or tools/install-deps.sh --python)")
    runs = [load(p) for p in args.runs]
    names = [os.path.basename(r[1]) for r in runs]
    if args.logdir and len(set(names)) != len(names):
        sys.exit("tensorboard_export: two runs share a directory name; export them to different --logdir")
    for (path, run_dir, train, evals), name in zip(runs, names):
        target = os.path.join(args.logdir, name) if args.logdir else run_dir
        counts = export(path, run_dir, train, evals, target, SummaryWriter)
        summary = ", ".join(f"{tag} {n}" for tag, n in sorted(counts.items()))
        print(f"tensorboard_export: {name}: {summary} -> {target}")
    where = args.logdir or os.path.commonpath([r[1] for r in runs])
    print(f"tensorboard_export: view with `tensorboard --logdir {where}`")


if __name__ == "__main__":
    main()
