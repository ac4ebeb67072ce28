#!/usr/bin/python3
"""Checks tools/plot_metrics.py and tools/tensorboard_export.py on run directories (standard library only).

usage: plot_tools_test.py plot OUTPUT.png RUN_DIR [RUN_DIR ...]
       plot_tools_test.py tensorboard LOGDIR RUN_DIR [RUN_DIR ...]
       plot_tools_test.py synthetic WORKDIR   (makes runs with and without eval records, then both checks)

plot: the tool exits 0 and writes one PNG of a sensible size. tensorboard: the tool's event files, read here
with our own TFRecord and protobuf decoding (CRCs checked), hold every series of metrics.jsonl under its tag,
with the steps and values of the file. Exits 77 (a CTest skip) when the exporter's interpreter cannot import
tensorboardX, and says so.
"""
import glob
import json
import math
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
PLOT = os.path.join(TOOLS, "plot_metrics.py")
EXPORT = os.path.join(TOOLS, "tensorboard_export.py")
SKIP = 77


def fail(message):
    sys.exit(f"FAIL: {message}")


def run(command):
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        fail(f"{os.path.basename(command[0])} exited {done.returncode}")
    return done.stdout


# --- metrics.jsonl, read the way the tools' documentation says ---------------------------------------------

def records(run_dir):
    train, evals = [], []
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                kind = [str(r.get(k, "")).lower() for k in ("kind", "type", "split", "phase", "event")]
                marked = any(k in ("eval", "evaluation", "validation", "val") for k in kind)
                if "eval_loss" in r or marked:
                    evals.append(r)
                if "loss" in r and not marked:  # mtf's line at an evaluated step has both
                    train.append(r)
    return train, evals


def expected_series(run_dir):
    """tag -> [(step, value)] that the exporter must write for run_dir."""
    train, evals = records(run_dir)
    out = {}
    for tag, key, scale in (("loss/train", "loss", 1), ("train/learning_rate", "lr", 1),
                            ("train/grad_norm", "grad_norm", 1), ("perf/tokens_per_s", "tokens_per_s", 1),
                            ("perf/mfu_percent", "mfu", 100), ("perf/step_ms", "step_ms", 1),
                            ("perf/comm_percent", "comm_frac", 100)):
        points = [(r["step"], r[key] * scale) for r in train if key in r]
        if points:
            out[tag] = sorted(points)
    for r in evals:
        loss = r.get("eval_loss", r.get("loss"))
        out.setdefault("loss/eval", []).append((r["step"], loss))
        perplexity = r.get("eval_perplexity", r.get("perplexity"))
        out.setdefault("eval/perplexity", []).append((r["step"], perplexity if perplexity is not None
                                                      else math.exp(loss)))
    for tag in ("loss/eval", "eval/perplexity"):
        if tag in out:
            out[tag].sort()
    return out


# --- TFRecord framing and the few protobuf fields of tensorboard's Event ------------------------------------

def crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        if at + 12 > len(data):
            fail(f"{path}: truncated record header at byte {at}")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if masked_crc32c(header) != length_crc:
            fail(f"{path}: bad length CRC at byte {at}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or at + 16 + length > len(data):
            fail(f"{path}: truncated record at byte {at}")
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked_crc32c(body) != body_crc:
            fail(f"{path}: bad data CRC at byte {at}")
        yield body
        at += 16 + length


def varint(buf, at):
    value, shift = 0, 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, at


def fields(buf):
    """(field number, wire type, value) of a protobuf message: ints, 8/4-byte little-endian bytes, or bytes."""
    at = 0
    while at < len(buf):
        key, at = varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(buf, at)
            value, at = buf[at:at + length], at + length
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            fail(f"unexpected protobuf wire type {wire}")
        yield number, wire, value


def read_scalars(path):
    """tag -> [(step, value, wall_time)] of an event file (Event: 1 wall_time, 2 step, 5 summary; Summary: 1
    value; Value: 1 tag, 2 simple_value), and whether it starts with a file_version event."""
    scalars, versioned = {}, False
    for body in tfrecords(path):
        wall, step, summary = 0.0, 0, None
        for number, wire, value in fields(body):
            if number == 1 and wire == 1:
                (wall,) = struct.unpack("<d", value)
            elif number == 2 and wire == 0:
                step = value
            elif number == 3 and wire == 2 and value.startswith(b"brain.Event:"):
                versioned = True
            elif number == 5 and wire == 2:
                summary = value
        if summary is None:
            continue
        for number, wire, value in fields(summary):
            if number != 1 or wire != 2:
                continue
            tag, simple = None, None
            for n, w, v in fields(value):
                if n == 1 and w == 2:
                    tag = v.decode("utf-8")
                elif n == 2 and w == 5:
                    (simple,) = struct.unpack("<f", v)
            if tag is not None and simple is not None:
                scalars.setdefault(tag, []).append((step, simple, wall))
    return scalars, versioned


# --- the checks ----------------------------------------------------------------------------------------------

def check_plot(output, run_dirs):
    if os.path.exists(output):
        os.remove(output)
    stdout = run([PLOT, *run_dirs, "--output", output])
    if f"plot_metrics: {len(run_dirs)} run" not in stdout or output not in stdout:
        fail(f"plot_metrics printed no summary line for {len(run_dirs)} runs and {output}")
    if not os.path.isfile(output):
        fail(f"{output} was not written")
    with open(output, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        fail(f"{output} is not a PNG")
    width, height = struct.unpack(">II", head[16:24])
    size = os.path.getsize(output)
    if width < 800 or height < 600 or size < 30_000:
        fail(f"{output}: {width}x{height}, {size} bytes: too small for six panels of curves")
    print(f"ok: {output}: {width}x{height} PNG, {size} bytes, {len(run_dirs)} runs")


def exporter_interpreter():
    with open(EXPORT, encoding="utf-8") as f:
        line = f.readline()
    if not line.startswith("#!"):
        fail(f"{EXPORT} has no interpreter line")
    return line[2:].split()


def check_tensorboard(logdir, run_dirs):
    interpreter = exporter_interpreter()
    probe = subprocess.run([*interpreter, "-c", "import tensorboardX"], capture_output=True, text=True)
    venv_python = os.path.join(os.path.dirname(EXPORT), "..", ".venv", "bin", "python")
    if probe.returncode != 0 and os.path.exists(venv_python):  # the exporter re-runs itself with .venv's python
        probe = subprocess.run([venv_python, "-c", "import tensorboardX"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: {' '.join(interpreter)} cannot import tensorboardX (python3 -m pip install tensorboardX, or "
              f"tools/install-deps.sh --python): {probe.stderr.strip().splitlines()[-1:]}")
        sys.exit(SKIP)
    shutil.rmtree(logdir, ignore_errors=True)
    for _ in range(2):  # the second export replaces the first one's files
        run([EXPORT, *run_dirs, "--logdir", logdir])
    for run_dir in run_dirs:
        name = os.path.basename(os.path.abspath(run_dir))
        files = glob.glob(os.path.join(logdir, name, "events.out.tfevents.*"))
        if len(files) != 1:
            fail(f"{logdir}/{name}: {len(files)} event files after two exports, expected 1")
        scalars, versioned = read_scalars(files[0])
        if not versioned:
            fail(f"{files[0]}: no file_version event first")
        expected = expected_series(run_dir)
        if sorted(scalars) != sorted(expected):
            fail(f"{files[0]}: tags {sorted(scalars)}, expected {sorted(expected)}")
        for tag, points in expected.items():
            got = scalars[tag]
            if [p[0] for p in got] != [p[0] for p in points]:
                fail(f"{files[0]}: {tag} at steps {[p[0] for p in got]}, expected {[p[0] for p in points]}")
            for (step, value, _), (_, want) in zip(got, points):
                if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-30):
                    fail(f"{files[0]}: {tag} at step {step} is {value}, expected {want}")
            walls = [p[2] for p in got]
            if walls != sorted(walls) or walls[0] < 1e9:
                fail(f"{files[0]}: {tag}: wall times {walls[:3]}... are not increasing Unix times")
        summary = ", ".join(f"{t} x{len(p)}" for t, p in sorted(expected.items()))
        print(f"ok: {files[0]}: {summary}")
    # Where tensorboard itself is installed, its reader must agree (the files are for `tensorboard --logdir`).
    reader = ("import sys\nfrom tensorboard.backend.event_processing import event_accumulator as ea\n"
              "a = ea.EventAccumulator(sys.argv[1]); a.Reload()\n"
              "print(' '.join(f'{t}={len(a.Scalars(t))}' for t in sorted(a.Tags()['scalars'])))\n")
    for run_dir in run_dirs:
        target = os.path.join(logdir, os.path.basename(os.path.abspath(run_dir)))
        done = subprocess.run([*interpreter, "-c", reader, target], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"note: tensorboard's reader not run ({(done.stderr.strip().splitlines() or ['?'])[-1]})")
            break
        want = " ".join(f"{t}={len(p)}" for t, p in sorted(expected_series(run_dir).items()))
        if done.stdout.strip() != want:
            fail(f"tensorboard reads {target} as {done.stdout.strip()}, expected {want}")
        print(f"ok: tensorboard's EventAccumulator reads {target}: {want}")


def synthetic(workdir):
    """Runs: 'no-eval' (train records only, 1 rank), 'eval-kind' ({"kind": "eval", "loss"} records at the
    eval_every steps, mesh b:2) and 'eval-field' ({"eval_loss"} records, mesh m:2), 30 log lines each."""
    shutil.rmtree(workdir, ignore_errors=True)
    made = []
    for name, shape, layout, style in (("no-eval", "", "", None), ("eval-kind", "b:2", "batch:b", "kind"),
                                       ("eval-field", "m:2", "heads:m,d_ff:m,vocab:m", "field")):
        run_dir = os.path.join(workdir, name)
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(f'model:\n  d_model: 64    # model width\nmesh:\n  shape: "{shape}"    # axes\n'
                    f'  layout: "{layout}"    # rules\ntrain:\n  steps: 300\n')
        lines = []
        for i in range(1, 31):
            step = 10 * i
            loss = 2.5 + 3.4 * math.exp(-step / 40) + 0.05 * math.sin(step)
            lines.append({"step": step, "loss": loss, "lr": 0.01 * min(1, step / 20) / math.sqrt(max(step, 20) / 20),
                          "grad_norm": 0.5 + 0.1 * math.cos(step), "tokens_per_s": 12000 - 3000 * bool(shape),
                          "step_ms": 80 + 20 * bool(shape), "mfu": 0.1 - 0.03 * bool(shape),
                          "comm_frac": 0.2 * bool(shape)})
            if style and step % 50 == 0:
                e = loss + 0.1
                lines.append({"step": step, "kind": "eval", "loss": e, "perplexity": math.exp(e), "tokens": 8192}
                             if style == "kind" else {"step": step, "eval_loss": e})
        with open(os.path.join(run_dir, "metrics.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in lines)
        made.append(run_dir)
    check_plot(os.path.join(workdir, "one-run.png"), made[:1])
    check_plot(os.path.join(workdir, "three-runs.png"), made)
    check_tensorboard(os.path.join(workdir, "tensorboard"), made)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "plot":
        check_plot(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "tensorboard":
        check_tensorboard(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 3 and sys.argv[1] == "synthetic":
        synthetic(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
