#!/usr/bin/env python3
"""Checkpoint surgery for tests/ckpt/bad_values.sh, with the checksum of docs/CHECKPOINTS.md ("Integrity")
recomputed independently of mtf, so that only the intended defect remains.
usage: poison.py FILE check                 every dataset's checksum recomputed here must equal the stored one
       poison.py FILE set DATASET VALUE     every element of variables/DATASET set to VALUE (nan, 1e38, ...),
                                            its checksum rewritten
       poison.py FILE attr NAME VALUE       the int64 root attribute NAME set to VALUE
       poison.py FILE strings NAME A B ...  the root attribute NAME replaced by an array of fixed-length strings
       poison.py FILE nullpad NAME VALUE    the root attribute NAME replaced by a NULLPAD string of exactly VALUE"""
import sys

import h5py
import numpy as np

M = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix64(x):
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def checksum(values):
    bits = np.ascontiguousarray(values, dtype="<f4").reshape(-1).view("<u4").astype(np.uint64)
    index = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = mix64(mix64(index + np.uint64(0x9E3779B97F4A7C15)) ^ bits)
        return int(np.sum(h, dtype=np.uint64))


path, op = sys.argv[1], sys.argv[2]
with h5py.File(path, "r+" if op != "check" else "r") as f:
    if op == "check":
        for name, d in f["variables"].items():
            got, stored = checksum(d[()]), int(d.attrs["checksum"])
            if got != stored:
                sys.exit(f"checksum of {name}: {got:016x} here, {stored:016x} stored")
        print(f"{len(f['variables'])} checksums agree")
    elif op == "set":
        d = f["variables"][sys.argv[3]]
        d[...] = np.float32(float(sys.argv[4]))
        d.attrs["checksum"] = np.uint64(checksum(d[()]))
    elif op == "attr":
        f.attrs[sys.argv[3]] = np.int64(int(sys.argv[4]))
    elif op == "strings":
        del f.attrs[sys.argv[3]]
        f.attrs[sys.argv[3]] = np.array([s.encode() for s in sys.argv[4:]], dtype="S%d" % max(len(s) for s in sys.argv[4:]))
    elif op == "nullpad":
        value = sys.argv[4].encode()
        del f.attrs[sys.argv[3]]
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(len(value))
        tid.set_strpad(h5py.h5t.STR_NULLPAD)
        space = h5py.h5s.create(h5py.h5s.SCALAR)
        attr = h5py.h5a.create(f.id, sys.argv[3].encode(), tid, space)
        attr.write(np.array(value, dtype="S%d" % len(value)))
