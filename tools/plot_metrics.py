#!/usr/bin/python3
"""Plots a run's metrics.jsonl (loss and throughput over steps) to a PNG with Debian's matplotlib.

usage: tools/plot_metrics.py RUN_DIR_OR_METRICS_JSONL [--output PLOT.png]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON line ({e})")
    if not rows:
        sys.exit(f"{path}: no metrics yet (mtf train writes one line every train.log_every steps)")
    return path, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="a run directory or its metrics.jsonl")
    parser.add_argument("--output", "-o", help="PNG to write (default: next to metrics.jsonl)")
    args = parser.parse_args()
    path, rows = load(args.metrics)
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(path)), "metrics.png")
    steps = [r["step"] for r in rows]
    fig, (ax_loss, ax_speed) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    ax_loss.plot(steps, [r["loss"] for r in rows], color="tab:blue")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title(os.path.dirname(os.path.abspath(path)))
    ax_loss.grid(alpha=0.3)
    ax_speed.plot(steps, [r["tokens_per_s"] for r in rows], color="tab:green", label="tokens/s")
    ax_speed.set_ylabel("tokens/s")
    ax_speed.set_xlabel("step")
    ax_speed.grid(alpha=0.3)
    mfu = ax_speed.twinx()
    mfu.plot(steps, [100 * r["mfu"] for r in rows], color="tab:orange", label="MFU %")
    mfu.set_ylabel("MFU %")
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    print(f"plot_metrics: {len(rows)} points -> {output}")


if __name__ == "__main__":
    main()
