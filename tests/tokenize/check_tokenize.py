"""The tokenize tests (tests/tokenize/CMakeLists.txt), run with the interpreter tools/install-deps.sh
--python sets up (.venv: h5py, numpy, tokenizers).

  roundtrip DECODE_IDS DATA            mtf's decode of every shard = the tokenizer's decode; mtf's greedy
                                       encoding of sample documents decodes back to them
  bad-tables MTF WORK                  hostile decode tables are refused by mtf data inspect, by name
  generate MTF MPIEXEC CONFIG DATA WORK DECODE_IDS  a short training on the BPE shards, then mtf generate prints the
                                       tokenizer's decode of the ids it samples, from the checkpoint alone;
                                       without a decode table it prints ids
"""
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np


def fail(message):
    sys.exit(f"check_tokenize: FAIL: {message}")


def run(cmd, want=0, stdin=None):
    proc = subprocess.run(cmd, input=stdin, capture_output=True)
    out = proc.stdout + proc.stderr
    if want is not None and proc.returncode != want:
        fail(f"{' '.join(map(str, cmd))}: exit {proc.returncode}, wanted {want}\n{out.decode(errors='replace')}")
    return proc.stdout, out.decode(errors="replace")


def shards(data):
    return sorted(os.path.join(data, n) for n in os.listdir(data) if n.endswith(".h5"))


def roundtrip(decode_ids, data):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(data, "tokenizer.json"))
    for path in shards(data):
        ids = h5py.File(path, "r")["tokens"][()].astype(np.int64)
        mine, _ = run([decode_ids, "shard", path, "decode"], stdin=" ".join(map(str, ids)).encode())
        theirs = tok.decode(ids.tolist(), skip_special_tokens=True).encode("utf-8")
        if mine != theirs:
            at = next(k for k in range(min(len(mine), len(theirs)) + 1) if k == min(len(mine), len(theirs))
                      or mine[k] != theirs[k])
            fail(f"{path}: mtf decodes {len(mine)} bytes, the tokenizer {len(theirs)}; first difference at byte {at}: "
                 f"{mine[at - 30:at + 30]!r} vs {theirs[at - 30:at + 30]!r}")
        print(f"roundtrip: {path}: {len(ids)} ids -> {len(mine)} bytes, equal to the tokenizer's decode")
        eot = int(h5py.File(path, "r").attrs["eot_id"])
        docs = np.split(ids, np.flatnonzero(ids == eot) + 1)
        for doc in [d for d in docs if len(d) > 1][:20]:
            text = tok.decode(doc.tolist(), skip_special_tokens=True)
            out, _ = run([decode_ids, "shard", path, "encode"], stdin=text.encode())
            greedy = [int(x) for x in out.split()]
            if tok.decode(greedy, skip_special_tokens=True) != text:
                fail(f"{path}: mtf's greedy encoding of {text[:60]!r} does not decode back to it")
        print(f"roundtrip: {path}: mtf's greedy encoding of 20 documents decodes back to them")


# ---- hostile tables ----

def write_shard(path, offsets=None, data=None, vocab=128, **extra):
    with h5py.File(path, "w") as f:
        f["tokens"] = (np.arange(200) % 100).astype(np.uint16)
        if vocab is not None:
            f.attrs["vocab_size"] = np.int64(vocab)
        f.attrs["eot_id"] = np.int64(0)
        f.attrs["tokenizer"] = np.bytes_(b"test")
        f.attrs["format_version"] = np.int64(1)
        if offsets is not None:
            f["decode_offsets"] = offsets
        if data is not None:
            f["decode_bytes"] = data
        for name, value in extra.items():
            f[name] = value


def good_table(vocab=128):
    lengths = np.array([0] + [1] * (vocab - 1), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return offsets, np.frombuffer(bytes(range(vocab - 1)), dtype=np.uint8).copy()


def bad_tables(mtf, work):
    os.makedirs(work, exist_ok=True)
    offsets, data = good_table()
    cases = {
        "good": (dict(offsets=offsets, data=data), 0, r"decode table 128 ids, 127 bytes"),
        "float-offsets": (dict(offsets=offsets.astype(np.float64), data=data), 1,
                          r"dataset 'decode_offsets' must hold int64, but holds a non-integer type of 8 bytes"),
        "int32-offsets": (dict(offsets=offsets.astype(np.int32), data=data), 1,
                          r"'decode_offsets' must hold int64, but holds signed integers of 4 bytes"),
        "signed-bytes": (dict(offsets=offsets, data=data.astype(np.int8)), 1,
                         r"'decode_bytes' must hold uint8, but holds signed integers of 1 bytes"),
        "wide-bytes": (dict(offsets=offsets, data=data.astype(np.uint16)), 1,
                       r"'decode_bytes' must hold uint8, but holds unsigned integers of 2 bytes"),
        "rank2-offsets": (dict(offsets=np.zeros((129, 2), dtype=np.int64), data=data), 1,
                          r"'decode_offsets' has 2 dimensions; it must be 1-D"),
        "scalar-bytes": (dict(offsets=offsets, data=np.uint8(7)), 1, r"'decode_bytes' has 0 dimensions"),
        "short-offsets": (dict(offsets=offsets[:100], data=data), 1,
                          r"'decode_offsets' holds 100 entries but vocab_size is 128: it must hold vocab_size \+ 1 = 129"),
        "huge-vocab": (dict(offsets=offsets, data=data, vocab=1 << 40), 1,
                       r"vocab_size.{0,8} (is )?1099511627776(,| is too large for a decode table)"),  # refused by the attribute range check first
        "no-vocab-size": (dict(offsets=offsets, data=data, vocab=None), 1,
                          r"has a decode table but no vocab_size attribute"),
        "only-offsets": (dict(offsets=offsets), 1, r"has 'decode_offsets' but no 'decode_bytes'"),
        "only-bytes": (dict(data=data), 1, r"has 'decode_bytes' but no 'decode_offsets'"),
        "decreasing": (dict(offsets=np.where(np.arange(129) == 50, 3, offsets).astype(np.int64), data=data), 1,
                       r"offsets must not decrease"),
        "past-end": (dict(offsets=np.where(np.arange(129) == 128, 1000, offsets).astype(np.int64), data=data), 1,
                     r"offsets must not decrease, stay within the 127 bytes"),
        "negative-start": (dict(offsets=np.where(np.arange(129) == 0, -5, offsets).astype(np.int64), data=data), 1,
                           r"decode_offsets\[0\] is -5; it must be 0"),
        "short-end": (dict(offsets=np.where(np.arange(129) == 128, 126, offsets).astype(np.int64), data=data), 1,
                      r"the last entry of decode_offsets is 126, but decode_bytes holds 127 bytes"),
        "long-token": (dict(offsets=np.concatenate([[0, 70000], np.full(127, 70000)]).astype(np.int64),
                            data=np.zeros(70000, dtype=np.uint8)), 1, r"give no token more than 65536 bytes"),
    }
    for name, (spec, want, pattern) in cases.items():
        path = os.path.join(work, f"{name}.h5")
        write_shard(path, **spec)
        _, out = run([mtf, "data", "inspect", path], want=want)
        if not re.search(pattern, out):
            fail(f"bad table '{name}': mtf data inspect said {out!r}, which does not match {pattern!r}")
        print(f"bad-tables: {name}: exit {want}: {out.strip().splitlines()[-1]}")
    # A group where a dataset should be.
    path = os.path.join(work, "group.h5")
    write_shard(path, offsets=offsets)
    with h5py.File(path, "a") as f:
        f.create_group("decode_bytes")
    _, out = run([mtf, "data", "inspect", path], want=1)
    if "'decode_bytes' is not a dataset HDF5 can open" not in out:
        fail(f"bad table 'group': {out!r}")
    print("bad-tables: group: refused")


# ---- training and generating ----

def generate(mtf, mpiexec, config, data, work, decode_ids):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(data, "tokenizer.json"))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run_dir = os.path.join(work, "run")
    model = ["--set", "model.vocab=4096", "--set", "model.length=32", "--set", "train.batch=8"]

    def train(shard_dir, steps, directory, evaluate):
        return [mpiexec, "-n", "2", mtf, "train", "--fresh", config, *model, "--set",
                f"data.train={shard_dir}/train-*.h5", "--set", f"data.eval={shard_dir}/val-*.h5" if evaluate else
                "data.eval=", "--set", f"train.steps={steps}", "--set", "train.log_every=10", "--set", "train.warmup_steps=1", "--set",
                f"train.checkpoint_every={steps}", "--set", "train.eval_batches=2", "--set", f"run.dir={directory}",
                "--mesh", "b:2", "--layout", "batch:b"]
    _, out = run(train(data, 30, run_dir, True))
    print(out.strip().splitlines()[-1])
    ckpt = os.path.join(run_dir, "checkpoints", "ckpt-00000030.h5")
    with h5py.File(ckpt, "r") as c, h5py.File(shards(data)[0], "r") as s:
        group = c["tokenizer"]
        if group.attrs["tokenizer"].decode() != s.attrs["tokenizer"].decode() or group.attrs["eot_id"] != 0 \
                or group.attrs["vocab_size"] != 4096:
            fail(f"checkpoint /tokenizer attributes {dict(group.attrs)} differ from the shard's")
        for name in ("decode_offsets", "decode_bytes"):
            if not np.array_equal(group[name][()], s[name][()]):
                fail(f"checkpoint /tokenizer/{name} differs from the shard's")
    print("generate: the checkpoint holds the shards' tokenizer and decode table")
    _, out = run([mtf, "ckpt", "inspect", ckpt])
    if not re.search(r"tokenizer: 'bpe-bytelevel-4096', vocab_size 4096, eot_id 0; decode table of 4096 ids", out):
        fail(f"mtf ckpt inspect does not show the tokenizer:\n{out}")

    # Hostile /tokenizer groups are refused by name.
    hostile = {
        "float-eot": (lambda g: g.attrs.__setitem__("eot_id", 0.5), 1, r"integer attributes 'eot_id' and 'vocab_size'"),
        "long-name": (lambda g: g.attrs.__setitem__("tokenizer", np.bytes_(b"x" * 5000)), 1, r"at most 63 characters"),
        "eot-past-vocab": (lambda g: g.attrs.__setitem__("eot_id", np.int64(5000)), 1,
                           r"eot_id 5000 is not an id below vocab_size 4096"),
        "decreasing": (lambda g: g["decode_offsets"].__setitem__(7, 1 << 40), 1, r"offsets must not decrease"),
        "float-bytes": (lambda g: (g.__delitem__("decode_bytes"), g.create_dataset("decode_bytes", data=np.zeros(3))),
                        1, r"'decode_bytes' must hold uint8, but holds a non-integer type"),
    }
    for name, (mutate, want, pattern) in hostile.items():
        bad = os.path.join(work, f"bad-{name}.h5")
        shutil.copyfile(ckpt, bad)
        with h5py.File(bad, "a") as f:
            if name in ("float-eot", "long-name", "eot-past-vocab"):
                del f["tokenizer"].attrs["eot_id" if name != "long-name" else "tokenizer"]
            mutate(f["tokenizer"])
        _, out = run([mtf, "ckpt", "inspect", bad], want=want)
        if not re.search(pattern, out):
            fail(f"hostile checkpoint '{name}': mtf ckpt inspect said {out!r}, not {pattern!r}")
    _, out = run([mpiexec, "-n", "1", mtf, "generate", config, *model, "--checkpoint", bad, "--prompt", "a"], want=1)
    if "must hold uint8" not in out:
        fail(f"generate from a hostile checkpoint: {out}")
    print(f"generate: {len(hostile)} hostile /tokenizer groups refused by mtf ckpt inspect (and generate)")

    # From the checkpoint alone: the data directory is gone for generate, on a mesh other than training's.
    gen = [mpiexec, "-n", "2", mtf, "generate", config, *model, "--set", f"run.dir={run_dir}",
           "--set", "data.train=/nonexistent/train-*.h5", "--set", "data.eval=", "--mesh", "m:2",
           "--layout", "vocab:m", "--prompt", "The ", "--max-new", "40", "--seed", "3"]
    text, out = run(gen)
    header = next(l for l in out.splitlines() if l.startswith("generate: checkpoint"))
    if "tokenizer 'bpe-bytelevel-4096'" not in header:
        fail(f"generate's header does not name the tokenizer: {header}")
    if b"generate: checkpoint" in text or b"backend: " in text:
        fail(f"generate's header lines must go to stderr, not stdout: {text!r}")
    generated = text.rstrip(b"\n")
    ids_out, _ = run(gen + ["--ids"])
    ids_line = ids_out.strip()
    ids = [int(x) for x in json.loads(ids_line)]  # --ids prints a JSON array of the prompt's and new ids
    greedy, _ = run([decode_ids, "ckpt", ckpt, "encode"], stdin=b"The ")
    n_prompt = len(greedy.split())
    if ids[:n_prompt] != [int(x) for x in greedy.split()]:
        fail(f"--ids printed {ids[:n_prompt]} for the prompt, mtf's encoding is {greedy.split()}")
    # mtf writes each token's bytes as it comes; the tokenizer decodes the whole sequence and replaces
    # invalid UTF-8 (a character the model left unfinished) with U+FFFD, so compare as text.
    expected = "The " + tok.decode(ids[n_prompt:], skip_special_tokens=True)
    if generated.decode("utf-8", errors="replace") != expected:
        fail(f"generate printed {generated!r}, the tokenizer decodes its ids to {expected!r}")
    if len(ids) <= n_prompt:
        fail("generate produced no token")
    print(f"generate: {len(ids) - n_prompt} tokens, printed as the tokenizer decodes them: {generated.decode(errors='replace')!r}")

    # --prompt-ids gives the same text for the same ids.
    same, _ = run(gen[:gen.index("--prompt")] + ["--prompt-ids", ",".join(map(str, ids[:n_prompt])), "--max-new",
                                                 "40", "--seed", "3"])
    if same.rstrip(b"\n") != generated:
        fail("--prompt-ids with the prompt's ids gives other text than --prompt")

    # Shards without a decode table: generate prints ids, and refuses a text prompt.
    bare = os.path.join(work, "bare")
    os.makedirs(bare)
    for path in shards(data):
        with h5py.File(path, "r") as s, h5py.File(os.path.join(bare, os.path.basename(path)), "w") as d:
            d["tokens"] = s["tokens"][()]
            for key, value in s.attrs.items():
                d.attrs[key] = value
    bare_run = os.path.join(work, "bare-run")
    run(train(bare, 2, bare_run, False))
    bare_gen = [mpiexec, "-n", "1", mtf, "generate", config, *model, "--set", f"run.dir={bare_run}", "--max-new", "5"]
    out, log = run(bare_gen + ["--prompt-ids", "0"])
    body = out.split(b"\n")
    if "(no decode table: ids)" not in log or not re.fullmatch(rb"0( [0-9]+){1,5}", body[0]):
        fail(f"without a decode table generate must print ids:\n{log}")
    _, log = run(bare_gen + ["--prompt", "The "], want=1)
    if "has no decode table, so a text prompt cannot be encoded: give the prompt as ids with --prompt-ids" not in log:
        fail(f"a text prompt without a decode table: {log}")
    print(f"generate: without a decode table: {body[0].decode()}; a text prompt is refused")


def main():
    command = sys.argv[1]
    if command == "roundtrip":
        roundtrip(*sys.argv[2:])
    elif command == "bad-tables":
        bad_tables(*sys.argv[2:])
    elif command == "generate":
        generate(*sys.argv[2:])
    else:
        fail(f"unknown command {command}")
    print(f"check_tokenize: {command}: ok")


if __name__ == "__main__":
    main()
