"""Reading mtf train's RUN_DIR/metrics.jsonl, for tools/plot_metrics.py and tools/tensorboard_export.py.

A line is a train record (step, loss, lr, grad_norm, tokens_per_s, step_ms, mfu, comm_frac, eta_s), and at an
evaluated step it also carries eval_loss, eval_perplexity and eval_tokens. Lines marked
{"kind": "eval", ...} ("kind", "type", "split", "phase" or "event" equal to "eval") are eval records only.
"""
import json
import math
import os
import sys

EVAL_MARKERS = ("eval", "evaluation", "validation", "val")
EVAL_KEYS = ("kind", "type", "split", "phase", "event")


def is_eval(record):
    """True for a line with an eval point (see the module's doc)."""
    if "eval_loss" in record:
        return True
    return any(str(record.get(k, "")).lower() in EVAL_MARKERS for k in EVAL_KEYS)


def is_train(record):
    """True for a line with the step's train figures (a train record, or mtf's line at an evaluated step)."""
    marked_eval = any(str(record.get(k, "")).lower() in EVAL_MARKERS for k in EVAL_KEYS)
    return not marked_eval and "loss" in record


def finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load(path):
    """(metrics.jsonl path, run directory, train records, eval records) of a run directory or metrics file."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"{path}: no such file (mtf train writes RUN_DIR/metrics.jsonl every train.log_every steps)")
    train, evals = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON line ({e})")
            if not isinstance(record, dict) or not finite(record.get("step")):
                sys.exit(f"{path}:{number}: not a metrics record (no numeric \"step\")")
            # mtf train's lines at an evaluated step carry both the step's train figures and eval_loss.
            if is_eval(record):
                evals.append(record)
            if is_train(record):
                train.append(record)
    if not train and not evals:
        sys.exit(f"{path}: no metrics yet (mtf train writes one line every train.log_every steps)")
    train.sort(key=lambda r: r["step"])
    evals.sort(key=lambda r: r["step"])
    return path, os.path.dirname(os.path.abspath(path)), train, evals
