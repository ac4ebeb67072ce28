#!/usr/bin/python3
"""Reads the shards `mtf data prepare` wrote with h5py (no mtf code) and checks them against the input
text: the format (1-D uint16 `tokens`, the attributes), the shard sizes, and that the train and val
streams are exactly the input files' bytes, each followed by the end-of-text id 256, split between train
and val by the rule docs/DATA.md states.

usage: check_shards.py INPUT_DIR SHARD_DIR SHARD_TOKENS VAL_FRACTION"""
import glob
import os
import sys

import h5py
import numpy as np

EOT, VOCAB = 256, 384


def documents(path):
    """The files prepare reads from a directory: sorted, no hidden entries, no links, no binary files."""
    docs = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name.encode()):
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        if entry.is_dir():
            docs.extend(documents(entry.path))
        elif entry.is_file():
            data = open(entry.path, "rb").read()
            if b"\0" not in data[:4096]:
                docs.append(data)
    return docs


def read_split(shard_dir, prefix, shard_tokens):
    paths = sorted(glob.glob(os.path.join(shard_dir, prefix + "-*.h5")))
    parts = []
    for i, path in enumerate(paths):
        assert os.path.basename(path) == "%s-%05d.h5" % (prefix, i), path
        with h5py.File(path, "r") as f:
            tokens = f["tokens"]
            assert tokens.ndim == 1 and tokens.dtype == np.uint16, (path, tokens.shape, tokens.dtype)
            attrs = dict(f.attrs)
            tokenizer = attrs["tokenizer"]
            tokenizer = tokenizer.decode() if isinstance(tokenizer, bytes) else str(tokenizer)
            assert attrs["vocab_size"] == VOCAB and attrs["eot_id"] == EOT, (path, attrs)
            assert tokenizer == "bytes" and attrs["format_version"] == 1, (path, attrs)
            assert attrs["num_tokens"] == tokens.shape[0], (path, attrs)
            if i < len(paths) - 1:
                assert tokens.shape[0] == shard_tokens, (path, tokens.shape)
            parts.append(tokens[:].astype(np.int64))
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), len(paths)


def main():
    input_dir, shard_dir, shard_tokens, val_fraction = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    docs = documents(input_dir)
    expect = {"train": [], "val": []}
    seen = val_tokens = 0
    for doc in docs:
        n = len(doc) + 1
        to_val = float(val_tokens + n) <= val_fraction * float(seen + n)
        expect["val" if to_val else "train"].append(doc)
        val_tokens += n if to_val else 0
        seen += n
    for split in ("train", "val"):
        stream, count = read_split(shard_dir, split, shard_tokens)
        want = np.array([t for doc in expect[split] for t in list(doc) + [EOT]], dtype=np.int64)
        assert stream.shape == want.shape and (stream == want).all(), \
            "%s: %d tokens in %d shards differ from the %d expected" % (split, stream.size, count, want.size)
        print("%s: %d documents, %d tokens in %d shards: identical to the input bytes" %
              (split, len(expect[split]), stream.size, count))
    assert expect["val"], "the test input should put at least one document in val"


if __name__ == "__main__":
    main()
