#!/usr/bin/env python3
"""Flips one bit in the stored bytes of a checkpoint dataset (tests/ckpt/integrity.sh).
usage: flip_bit.py FILE DATASET [SEED]   (DATASET under /variables; prints the byte offset flipped)
       flip_bit.py FILE --list           (prints every dataset name of /variables)"""
import random
import sys

import h5py

path, name = sys.argv[1], sys.argv[2]
if name == "--list":
    with h5py.File(path, "r") as f:
        print("\n".join(f["variables"].keys()))
    sys.exit(0)
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
with h5py.File(path, "r") as f:
    d = f["variables"][name]
    offset, size = d.id.get_offset(), d.id.get_storage_size()
where = offset + rng.randrange(size)
with open(path, "r+b") as f:
    f.seek(where)
    byte = f.read(1)[0]
    f.seek(where)
    f.write(bytes([byte ^ (1 << rng.randrange(8))]))
print(where)
