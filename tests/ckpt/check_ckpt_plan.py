#!/usr/bin/python3
"""Reads a checkpoint with h5py and checks every dataset against `mtf plan --json`'s variable list: each
plan variable is one float32 dataset at its logical shape with its dimension names, and there is no other;
the file attributes a reader needs are there. usage: check_ckpt_plan.py CKPT.h5 PLAN.json"""
import json
import sys

import h5py

ROOT_ATTRS = ["format_version", "step", "rng_seed", "rng_offset", "data_seed", "data_epoch", "data_position",
              "data_windows", "mesh", "mesh_ranks", "layout", "config", "complete"]


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def main(ckpt_path, plan_path):
    with open(plan_path) as f:
        plan = json.load(f)
    bad = 0
    with h5py.File(ckpt_path, "r") as f:
        for key in ROOT_ATTRS:
            if key not in f.attrs:
                print(f"missing file attribute {key}")
                bad += 1
        if f.attrs["format_version"] != 1 or "model:" not in text(f.attrs["config"]):
            print("bad format_version or config attribute")
            bad += 1
        group = f["variables"]
        seen = set()
        for var in plan["variables"]:
            name = var["name"].replace("/", ".")
            seen.add(name)
            if name not in group:
                print(f"plan variable {var['name']} has no dataset variables/{name}")
                bad += 1
                continue
            d = group[name]
            dims = [text(x) for x in d.attrs["dims"]]
            if list(d.shape) != var["sizes"] or dims != var["dims"] or d.dtype != "float32" \
                    or text(d.attrs["variable"]) != var["name"]:
                print(f"{var['name']}: checkpoint {dims} {d.shape} {d.dtype}, plan {var['dims']} {var['sizes']}")
                bad += 1
        extra = set(group) - seen
        if extra:
            print("datasets not in the plan:", sorted(extra))
            bad += 1
        print(f"{len(plan['variables'])} plan variables, {len(group)} datasets: "
              f"{'all match' if not bad else f'{bad} problems'}")
    return 1 if bad or not plan["variables"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
