#!/usr/bin/env python3
"""The PyTorch side of tools/bench_peers.sh, and the script's arithmetic (medians, FLOPs, the table).

  bench_peers.py torch --config configs/bench/X.yaml --procs 1|2 --threads T [--steps S --warmup W]
      trains the config's model in PyTorch on random tokens and prints one JSON line:
      {"setup", "step_ms": [...timed steps...], "median_ms", "tokens_per_s", "params", ...}
      --procs 2: DistributedDataParallel over gloo, 2 processes on localhost, each on its own core.
  bench_peers.py mtf RUN_DIR --config X.yaml --name NAME --warmup W --procs R --threads T
      the same JSON line from an mtf run's metrics.jsonl (one line per step: train.log_every 1)
  bench_peers.py table --config X.yaml RESULTS.jsonl CEILINGS.tsv
      prints the table (tokens/s, mtf/PyTorch, % of the 2-core sgemm ceiling)
  bench_peers.py count --config X.yaml
      prints the PyTorch model's parameter count and FLOPs per token (tests compare them with mtf plan's)

The model is mtf's (src/model/transformer.c), so both sides do the same FLOPs: pre-norm layer norm with
scale and bias (eps 1e-6), learned positions, q/k/v/o without biases (q's 1/sqrt(d_kv) is in its init, as
in mtf: no scaling of the logits), causal mask, gelu with the tanh approximation, tied embeddings with the
logits scaled by 1/sqrt(d_model), no dropout, no z-loss, mean cross-entropy; AdamW with mtf's settings
(betas 0.9/0.999, eps 1e-8, weight decay 0.01 on every parameter, lr 1e-3 constant). Initial values follow
mtf's scales (normal; wte 1, wpe 0.1, wq d_model^-0.5 d_kv^-0.5, wk/wv d_model^-0.5, wo (heads d_kv)^-0.5,
wi d_model^-0.5, mlp wo d_ff^-0.5) but are not mtf's numbers, so the losses agree only roughly.
"""
import argparse
import json
import math
import os
import statistics
import sys

KEYS = ("vocab", "d_model", "heads", "d_kv", "d_ff", "layers", "length")


def load_model(path):
    """The model and global batch of an mtf config in block style (configs/bench/*.yaml): the one place that
    states them, read here with a few lines instead of a YAML library, which Debian's python may lack."""
    section, values = None, {}
    for raw in open(path):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line.startswith(" "):
            section = line.rstrip(":").strip()
            continue
        key, _, value = line.strip().partition(":")
        values[f"{section}.{key.strip()}"] = value.strip()
    try:
        m = {k: int(values[f"model.{k}"]) for k in KEYS}
        m["batch"] = int(values["train.batch"])
    except (KeyError, ValueError) as e:
        sys.exit(f"bench_peers: {path}: needs integer model.{{{','.join(KEYS)}}} and train.batch in block style ({e})")
    expected = {"model.norm": "layer", "model.activation": "gelu", "model.tie_embeddings": "true",
                "model.dropout": "0.0", "model.z_loss": "0.0", "train.optimizer": "adamw"}
    for key, want in expected.items():
        if values.get(key) != want:
            sys.exit(f"bench_peers: {path}: {key} must be {want} (the PyTorch model is built for that), not "
                     f"{values.get(key)}")
    return m


LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.01


def param_count(m):
    d, hk = m["d_model"], m["heads"] * m["d_kv"]
    per_layer = 2 * d + 4 * d * hk + 2 * d + 2 * d * m["d_ff"]  # two norms (scale, bias), wq/wk/wv/wo, wi/wo
    return m["vocab"] * d + m["length"] * d + m["layers"] * per_layer + 2 * d


def flops_per_token(m):
    """mtf_transformer_flops_per_token: 6 N + 12 layers T (heads d_kv)."""
    return 6.0 * param_count(m) + 12.0 * m["layers"] * m["length"] * m["heads"] * m["d_kv"]


# ---- PyTorch ----

def build_model(torch, m):
    nn, F = torch.nn, torch.nn.functional
    V, D, H, DK, FF, T = m["vocab"], m["d_model"], m["heads"], m["d_kv"], m["d_ff"], m["length"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1 = nn.LayerNorm(D, eps=1e-6)
            self.qkv = nn.Linear(D, 3 * H * DK, bias=False)  # one matmul for q, k, v: the same FLOPs as three
            self.o = nn.Linear(H * DK, D, bias=False)
            self.n2 = nn.LayerNorm(D, eps=1e-6)
            self.wi = nn.Linear(D, FF, bias=False)
            self.wo = nn.Linear(FF, D, bias=False)
            with torch.no_grad():
                q, k, v = self.qkv.weight.split(H * DK, 0)
                q.normal_(0, D ** -0.5 / DK ** 0.5)
                k.normal_(0, D ** -0.5)
                v.normal_(0, D ** -0.5)
                self.o.weight.normal_(0, (H * DK) ** -0.5)
                self.wi.weight.normal_(0, D ** -0.5)
                self.wo.weight.normal_(0, FF ** -0.5)

        def forward(self, x, mask):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, DK).permute(2, 0, 3, 1, 4)
            logits = (q @ k.transpose(-1, -2)).masked_fill(mask, -1e9)
            x = x + self.o((torch.softmax(logits, -1) @ v).transpose(1, 2).reshape(b, t, H * DK))
            return x + self.wo(F.gelu(self.wi(self.n2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(torch.randn(V, D))
            self.wpe = nn.Parameter(torch.randn(T, D) * 0.1)
            self.blocks = nn.ModuleList([Block() for _ in range(m["layers"])])
            self.nf = nn.LayerNorm(D, eps=1e-6)
            # A plain attribute, not a buffer: DDP would broadcast buffers, and gloo has no bool type.
            self.mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)

        def forward(self, idx, targets):
            x = F.embedding(idx, self.wte) + self.wpe
            for block in self.blocks:
                x = block(x, self.mask)
            logits = (self.nf(x) @ self.wte.t()) * (1.0 / math.sqrt(D))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    return GPT()


def torch_train(rank, args, m, procs, out_path):
    import time

    import torch
    if procs > 1:
        os.sched_setaffinity(0, {rank % os.cpu_count()})  # one core per process, as mpiexec binds mtf's ranks
        import torch.distributed as dist
        dist.init_process_group("gloo", rank=rank, world_size=procs)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(torch, m)
    assert sum(p.numel() for p in model.parameters()) == param_count(m)
    if procs > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    # Every parameter decays, as in mtf (src/train/optimizer.c applies AdamW's decay to every variable).
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    local_batch = m["batch"] // procs
    gen = torch.Generator().manual_seed(1 + rank)
    idx = torch.randint(0, m["vocab"], (local_batch, m["length"]), generator=gen)
    tgt = torch.randint(0, m["vocab"], (local_batch, m["length"]), generator=gen)
    times, losses = [], []
    load = os.getloadavg()[0]
    for _ in range(args.warmup + args.steps):
        start = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    if procs > 1:
        dist.destroy_process_group()
    if rank == 0:
        timed = [1e3 * t for t in times[args.warmup:]]
        median = statistics.median(timed)
        name = f"PyTorch {torch.__version__}, " + (f"DDP {procs} x {args.threads} (gloo)" if procs > 1 else
                                                   f"1 process x {args.threads} thread{'s' if args.threads > 1 else ''}")
        record = dict(setup=name, side="pytorch", procs=procs, threads=args.threads, step_ms=timed, load=load,
                      median_ms=median, tokens_per_s=m["batch"] * m["length"] / (median / 1e3),
                      params=param_count(m), loss_first=losses[0], loss_last=losses[-1])
        with open(out_path, "w") as f:
            f.write(json.dumps(record) + "\n")


def cmd_torch(args):
    m = load_model(args.config)
    out_path = args.out or "/dev/stdout"
    if args.procs == 1:
        torch_train(0, args, m, 1, out_path)
        return
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(torch_train, args=(args, m, args.procs, out_path), nprocs=args.procs, join=True)


# ---- mtf's metrics ----

def cmd_mtf(args):
    m = load_model(args.config)
    steps = []
    with open(os.path.join(args.run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "step_ms" in r:
                steps.append((r["step"], r["step_ms"], r["loss"]))
    steps.sort()
    timed = [ms for step, ms, _ in steps if step > args.warmup]
    if len(timed) < 1:
        sys.exit(f"bench_peers: {args.run_dir}: no step after the {args.warmup} warm-up steps in metrics.jsonl")
    median = statistics.median(timed)
    print(json.dumps(dict(setup=args.name, side="mtf", procs=args.procs, threads=args.threads, step_ms=timed, load=args.load,
                          median_ms=median,
                          tokens_per_s=m["batch"] * m["length"] / (median / 1e3), loss_first=steps[0][2],
                          loss_last=steps[-1][2])))


# ---- the table ----

def cmd_table(args):
    m = load_model(args.config)
    rows = []  # one per setup, its rounds pooled: every timed step, the loads its runs started under
    for line in open(args.results):
        if not line.strip():
            continue
        r = json.loads(line)
        same = [row for row in rows if row["setup"] == r["setup"]]
        if same:
            row = same[0]
            row["step_ms"] += r["step_ms"]
            row["loads"].append(r["load"])
            row["loss_last"] = r["loss_last"]
        else:
            row = dict(r, loads=[r["load"]])
            rows.append(row)
        row["median_ms"] = statistics.median(row["step_ms"])
        row["tokens_per_s"] = m["batch"] * m["length"] / (row["median_ms"] / 1e3)
    ceilings = {}
    # mtf's setups against PyTorch's on the same processes and threads: 1 x 2 threads, and 2 x 1 thread.
    for line in open(args.ceilings):  # "LABEL<TAB>GFLOP/s<TAB>mtf_bench_sgemm's line"
        label, gflops, text = line.rstrip("\n").split("\t", 2)
        ceilings[label] = (float(gflops), text)
    rows.sort(key=lambda row: row["side"] != "mtf")  # mtf's rows first, each side in the order it ran
    ceiling = max(g for g, _ in ceilings.values()) * 1e9
    fpt = flops_per_token(m)
    torch_rows = [r for r in rows if r["side"] == "pytorch"]
    best_torch = max((r["tokens_per_s"] for r in torch_rows), default=0)
    print(f"model {os.path.basename(args.config)}: {param_count(m) / 1e6:.2f}M parameters, {m['layers']} layers, d_model {m['d_model']}, "
          f"{m['heads']} heads x {m['d_kv']}, d_ff {m['d_ff']}, vocab {m['vocab']}, T {m['length']}, "
          f"global batch {m['batch']} ({m['batch'] * m['length']} tokens/step), AdamW")
    print(f"model FLOPs per token {fpt / 1e6:.1f}M (6 N + 12 layers T heads d_kv, as mtf counts them)")
    for label, (g, text) in ceilings.items():
        print(f"sgemm ceiling, {label}: {text}")
    print(f"ceiling used for '% of peak': {ceiling / 1e9:.1f} GFLOP/s (the higher of the two 2-core measurements)")
    print()
    steps = {len(r["step_ms"]) for r in rows}
    print(f"ms/step: the median of {'/'.join(map(str, sorted(steps)))} timed steps after the warm-up, per setup; "
          "tokens/s = global batch x T / that median; x PyTorch: mtf's tokens/s over the best PyTorch setup's, and "
          "over PyTorch's with the same processes x threads (1 x 2 against 1 x 2, 2 x 1 against DDP 2 x 1); % of peak: "
          "model FLOPs/s over the ceiling above; load at start: the 1-minute load average as each round's run "
          "started (2 cores: above 2 means other work shared them). Losses (first and last step of the rounds) are "
          "a sanity check only: PyTorch trains on uniform random ids, mtf on the synthetic shards.")
    cols = [("setup", 50), ("ms/step", 9), ("tokens/s", 9), ("x best PyTorch", 14), ("x PyTorch alike", 15),
            ("% of peak", 9), ("load at start", 13), ("loss first -> last", 18)]
    print("| " + " | ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(cols)) + " |")
    print("|" + "|".join("-" * (w + 2) for _, w in cols) + "|")
    for r in rows:
        alike = [t["tokens_per_s"] for t in torch_rows if t["procs"] == r.get("procs") and t["threads"] == r.get("threads")]
        best = f"{r['tokens_per_s'] / best_torch:.2f}" if best_torch and r["side"] == "mtf" else ""
        same = f"{r['tokens_per_s'] / alike[0]:.2f}" if alike and r["side"] == "mtf" else ""
        pct = f"{100 * fpt * r['tokens_per_s'] / ceiling:.1f}%"
        loss = f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}"
        load = "/".join(f"{x:.1f}" for x in r["loads"])
        cells = [r["setup"], f"{r['median_ms']:.1f}", f"{r['tokens_per_s']:.0f}", best, same, pct, load, loss]
        print("| " + " | ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, (_, w)) in enumerate(zip(cells, cols)))
              + " |")
    if not torch_rows:
        print("(no PyTorch rows: see above)")


def cmd_count(args):
    m = load_model(args.config)
    print(f"parameters {param_count(m)} flops_per_token {flops_per_token(m):.0f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("--config", required=True)
    t.add_argument("--procs", type=int, choices=(1, 2), default=1)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--steps", type=int, default=10)
    t.add_argument("--warmup", type=int, default=2)
    t.add_argument("--out")
    r = sub.add_parser("mtf")
    r.add_argument("run_dir")
    r.add_argument("--config", required=True)
    r.add_argument("--name", required=True)
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--procs", type=int, required=True)
    r.add_argument("--threads", type=int, required=True)
    r.add_argument("--load", type=float, default=0.0, help="the 1-minute load average when the run started")
    b = sub.add_parser("table")
    b.add_argument("--config", required=True)
    b.add_argument("results")
    b.add_argument("ceilings")
    c = sub.add_parser("count")
    c.add_argument("--config", required=True)
    args = p.parse_args()
    {"torch": cmd_torch, "mtf": cmd_mtf, "table": cmd_table, "count": cmd_count}[args.cmd](args)


if __name__ == "__main__":
    main()
