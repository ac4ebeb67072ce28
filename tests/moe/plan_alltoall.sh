#!/usr/bin/env bash
# Expert parallelism communicates by alltoall: `mtf plan --json` of configs/moe-small.yaml with the
# experts split over the batch's axis has no allgather, and exactly 4 alltoalls per step per MoE layer
# (the dispatched tokens to the experts and the experts' outputs back, forward and backward), each moving
# (n-1)/n of this rank's [experts, groups/n, capacity, d_model] block, n the batch axis's size: bytes
# computed here from the config, not taken from the plan.
# usage: plan_alltoall.sh MTF CONFIG
set -euo pipefail
mtf=$1 config=$2
check() { # mesh layout n_batch [--set k=v]...
  local mesh=$1 layout=$2 n=$3
  shift 3
  local plan
  plan=$("$mtf" plan "$config" --mesh "$mesh" --layout "$layout" --json "$@")
  python3 - "$plan" "$mesh" "$layout" "$n" "$@" <<'PY'
import json, math, sys
plan, mesh, layout, n = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
sets = dict(a.split("=", 1) for a in sys.argv[5:] if "=" in a)
E, M, L, B = 8, 32, 16, 8          # configs/moe-small.yaml
S = int(sets.get("model.moe.group_size", 16))
k = 1 if sets.get("model.moe.gating") == "switch" else 2
C = min(S, math.ceil(S * k * 1.25 / E))
G = B * L // S
per_call = E * (G // n) * C * M * 4 * (n - 1) // n
a2a, ag = plan["collectives"]["alltoall"], plan["collectives"]["allgather"]
print(f"{mesh} {layout} {sys.argv[5:]}: alltoall {a2a['calls']} calls {a2a['bytes']} bytes (want 4 x {per_call}), "
      f"allgather {ag['calls']} calls")
assert a2a["calls"] == 4 and a2a["bytes"] == 4 * per_call, plan["collectives"]
assert ag["calls"] == 0, plan["collectives"]
PY
}
check b:4 "batch:b;experts:b" 4
check b:4 "batch:b;experts:b" 4 --set model.moe.gating=switch --set model.moe.group_size=32
check "b:2;m:2" "batch:b;experts:b;d_ff:m" 2
