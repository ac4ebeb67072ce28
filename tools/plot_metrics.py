#!/usr/bin/python3
"""Plots the metrics.jsonl of one or more runs (loss, learning rate, throughput, MFU against steps) to one PNG.

usage: tools/plot_metrics.py RUN_DIR [RUN_DIR ...] [--output PLOT.png] [--smooth K] [--title TEXT]

Each RUN_DIR (or a metrics.jsonl path) is one colour; its legend entry is the directory's name with the
mesh and layout read from RUN_DIR/config.yaml, so runs of one model on different layouts can be compared.
Panels: train loss (raw, thin; smoothed, bold: a centred mean) with eval loss points, learning rate (log scale), tokens/s,
MFU, gradient norm, and the share of step time spent communicating.

Train records are the lines `mtf train` writes every train.log_every steps ({"step", "loss", "lr",
"grad_norm", "tokens_per_s", "step_ms", "mfu", "comm_frac"}). Eval records are lines that say so:
{"step": S, "kind": "eval", "loss": L, ...} ("kind", "type", "split", "phase" or "event" equal to "eval"),
or any line with an "eval_loss" field. A run without eval records is plotted without eval points.
Runs with Debian's matplotlib (python3-matplotlib): no display is needed.
"""
import argparse
import os
import re
import sys

try:
    import matplotlib
except ImportError as missing:
    sys.exit(f"plot_metrics: error: {missing} (Python {sys.executable}): install Debian's python3-matplotlib "
             f"('apt-get install python3-matplotlib', which 'bash tools/install-deps.sh' does) and run "
             f"tools/plot_metrics.py again")

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import EngFormatter, MaxNLocator, NullLocator, ScalarFormatter  # noqa: E402

from metrics_jsonl import finite, load  # noqa: E402  (tools/metrics_jsonl.py, beside this script)


def eval_loss(record):
    return record.get("eval_loss", record.get("loss"))


def series(records, key, scale=1.0):
    """(steps, values) of the records whose `key` is a finite number."""
    points = [(r["step"], r[key] * scale) for r in records if finite(r.get(key))]
    return [p[0] for p in points], [p[1] for p in points]


def smooth(values, half_width):
    """A centred moving average over 2*half_width+1 points, narrowed symmetrically at the ends (the first and last
    points are raw): unlike an exponential average it does not lag behind a falling loss, which matters on short
    runs with few points."""
    out = []
    for i in range(len(values)):
        k = min(half_width, i, len(values) - 1 - i)
        window = values[i - k:i + k + 1]
        out.append(sum(window) / len(window))
    return out


def default_half_width(points):
    """About 5% of the run's points on each side: none below 20 points, 1 at 20..59, 6 at 120."""
    return points // 20


def describe(run_dir):
    """'mesh b:2, layout batch:b' from RUN_DIR/config.yaml ('1 rank' without a mesh), or '' without the file."""
    try:
        with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ""
    section = re.search(r"^mesh:\n((?:[ \t]+.*\n?)*)", text, re.M)
    if not section:
        return ""

    def field(name):
        m = re.search(rf"^\s+{name}:\s*(\"[^\"]*\"|[^#\s]*)", section.group(1), re.M)
        return m.group(1).strip('"') if m else ""

    shape, layout = field("shape"), field("layout")
    if not shape:
        return "1 rank"
    return f"mesh {shape}, layout {layout}" if layout else f"mesh {shape}"


def labels(run_dirs):
    """Short unique names: the directories' basenames, or their paths past a common prefix where these clash."""
    names = [os.path.basename(d) or d for d in run_dirs]
    if len(set(names)) == len(names):
        return names
    common = os.path.commonpath(run_dirs)
    return [os.path.relpath(d, common) if d != common else d for d in run_dirs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (or their metrics.jsonl)")
    parser.add_argument("--output", "-o",
                        help="PNG to write (default: RUN_DIR/metrics.png for one run, ./metrics.png for several)")
    parser.add_argument("--smooth", type=int, metavar="K",
                        help="smooth the train loss over 2K+1 points, centred (default: K = points/20; 0 = off)")
    parser.add_argument("--title", help="figure title (default: the run directory, or 'N runs')")
    args = parser.parse_args()
    if args.smooth is not None and args.smooth < 0:
        parser.error("--smooth must be 0 or more")
    runs = [load(p) for p in args.runs]
    run_dirs = [r[1] for r in runs]
    if args.output:
        output = args.output
    elif len(runs) == 1:
        output = os.path.join(run_dirs[0], "metrics.png")
    else:
        output = "metrics.png"

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(3, 2, figsize=(13, 10.5), sharex=True)
    (ax_loss, ax_lr), (ax_tok, ax_mfu), (ax_grad, ax_comm) = axes
    run_handles = []
    any_eval = False
    widest = 0
    names = labels(run_dirs)
    for index, ((path, run_dir, train, evals), name) in enumerate(zip(runs, names)):
        colour = colours[index % len(colours)]
        # Identical curves (layout invariance) would hide each other: later runs are dashed and thinner.
        style = ["-", "--", "-.", ":"][index % 4]
        width = max(2.2 - 0.4 * index, 1.0)
        steps, loss = series(train, "loss")
        if steps:
            half_width = default_half_width(len(loss)) if args.smooth is None else args.smooth
            widest = max(widest, half_width)
            if half_width:
                ax_loss.plot(steps, loss, color=colour, alpha=0.25, linewidth=1.0)
            ax_loss.plot(steps, smooth(loss, half_width), color=colour, linewidth=width, linestyle=style)
        eval_points = [(r["step"], eval_loss(r)) for r in evals if finite(eval_loss(r))]
        if eval_points:
            any_eval = True
            ax_loss.plot([p[0] for p in eval_points], [p[1] for p in eval_points], color=colour, linestyle=":",
                         linewidth=1.2, marker="o", markersize=6, markerfacecolor="white", markeredgewidth=1.8)
        for ax, key, scale in ((ax_lr, "lr", 1.0), (ax_tok, "tokens_per_s", 1.0), (ax_mfu, "mfu", 100.0),
                               (ax_grad, "grad_norm", 1.0), (ax_comm, "comm_frac", 100.0)):
            xs, ys = series(train, key, scale)
            if xs:
                ax.plot(xs, ys, color=colour, linewidth=width, linestyle=style, marker="." if len(xs) < 40 else None)
        detail = describe(run_dir)
        last = f"loss {loss[-1]:.3f}" if loss else "no train records"
        if eval_points:
            last += f", eval {eval_points[-1][1]:.3f}"
        label = f"{name}  ({detail}; {last})" if detail else f"{name}  ({last})"
        run_handles.append(Line2D([], [], color=colour, linewidth=2.2, linestyle=style, label=label))

    ax_loss.set_title("loss")
    ax_loss.set_ylabel("cross-entropy (nats/token, log scale)")
    ax_loss.set_yscale("log")
    ax_loss.yaxis.set_major_locator(MaxNLocator(8))  # a loss spans less than a decade: plain ticks
    ax_loss.yaxis.set_major_formatter(ScalarFormatter())
    ax_loss.yaxis.set_minor_locator(NullLocator())
    style_handles = [Line2D([], [], color="grey", alpha=0.35, linewidth=1.0, label="train (raw)")] if widest else []
    style_handles.append(Line2D([], [], color="grey", linewidth=2.2,
                                label=f"train (mean of {2 * widest + 1} points)" if widest else "train"))
    if any_eval:
        style_handles.append(Line2D([], [], color="grey", linestyle=":", marker="o", markerfacecolor="white",
                                    markeredgewidth=1.8, label="eval"))
    ax_loss.legend(handles=style_handles, loc="upper right", fontsize=9)
    ax_lr.set_title("learning rate")
    ax_lr.set_ylabel("learning rate")
    if any(series(r[2], "lr")[1] and min(series(r[2], "lr")[1]) > 0 for r in runs):
        ax_lr.set_yscale("log")
    ax_tok.set_title("throughput")
    ax_tok.set_ylabel("tokens/s")
    ax_tok.yaxis.set_major_formatter(EngFormatter(sep=""))
    ax_tok.set_ylim(bottom=0)
    ax_mfu.set_title("model FLOPs utilisation")
    ax_mfu.set_ylabel("MFU (% of measured peak)")
    ax_mfu.set_ylim(bottom=0)
    ax_grad.set_title("global gradient norm")
    ax_grad.set_ylabel("‖g‖₂")
    ax_comm.set_title("communication")
    ax_comm.set_ylabel("% of step time")
    ax_comm.set_ylim(0, max(ax_comm.get_ylim()[1], 1.0))  # one rank: a flat 0, not a magnified 0
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    title = args.title or (run_dirs[0] if len(runs) == 1 else " vs ".join(names))
    fig.suptitle(title, fontsize=14)
    fig.legend(handles=run_handles, loc="lower center", ncol=1 if len(runs) > 2 else len(runs), fontsize=10,
               frameon=False)
    legend_rows = len(runs) if len(runs) > 2 else 1
    fig.tight_layout(rect=(0, 0.03 + 0.028 * legend_rows, 1, 0.97))
    fig.savefig(output, dpi=110)
    points = sum(len(r[2]) + len(r[3]) for r in runs)
    evals = sum(len(r[3]) for r in runs)
    print(f"plot_metrics: {len(runs)} run{'s' if len(runs) != 1 else ''}, {points} points ({evals} eval) -> {output}")


if __name__ == "__main__":
    main()
