#!/usr/bin/python3
"""Checks that two mtf checkpoints hold the same state bit for bit: the same datasets with the same dims,
shapes and bytes, and the same step, RNG state and data cursor. Read with h5py alone (no mtf code).
usage: compare_ckpt.py A.h5 B.h5"""
import sys

import h5py
import numpy as np

STATE = ["step", "rng_seed", "rng_offset", "data_seed", "data_epoch", "data_position", "data_windows"]


def main(a_path, b_path):
    bad = 0
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b:
        for key in STATE:
            if a.attrs[key] != b.attrs[key]:
                print(f"attribute {key}: {a.attrs[key]} vs {b.attrs[key]}")
                bad += 1
        names_a, names_b = set(a["variables"]), set(b["variables"])
        if names_a != names_b:
            print("datasets differ:", sorted(names_a ^ names_b))
            bad += 1
        for name in sorted(names_a & names_b):
            x, y = a["variables"][name], b["variables"][name]
            if x.shape != y.shape or list(x.attrs["dims"]) != list(y.attrs["dims"]):
                print(f"{name}: shape {x.shape} vs {y.shape}")
                bad += 1
                continue
            xs, ys = x[()], y[()]
            if xs.tobytes() != ys.tobytes():
                diff = np.abs(xs.astype(np.float64) - ys).max()
                print(f"{name}: values differ (max abs difference {diff:g})")
                bad += 1
        print(f"compared {len(names_a & names_b)} datasets of {a_path} and {b_path}: "
              f"{'identical' if not bad else f'{bad} differences'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
