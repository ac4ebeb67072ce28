#!/usr/bin/env python3
"""The PyTorch side of tools/bench_peers.sh, and the script's arithmetic (medians, FLOPs, the table).

  bench_peers.py torch --config configs/bench/X.yaml --procs 1|2 --threads T [--steps S --warmup W]
                       [--precision fp32|bf16] [--compile] [--out FILE]
      trains the config's model in PyTorch on random tokens and prints one JSON line:
      {"setup", "step_ms": [...timed steps...], "median_ms", "tokens_per_s", "params", ...}
      --procs 2: DistributedDataParallel over gloo, 2 processes on localhost, each on its own core.
      --precision bf16: forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) (weights, gradients
      and AdamW stay fp32: PyTorch's mixed precision); needs torch.autocast (PyTorch 1.10+).
      --compile: the model (the DDP module with --procs 2) through torch.compile (inductor, C++ kernels on the
      CPU; the first warm-up step compiles); needs PyTorch 2.0+.
      A setup this torch lacks is not run: the JSON line then has "skipped" (the reason, also on stderr) and
      no timings, and the exit status is 3.
  bench_peers.py mtf RUN_DIR --config X.yaml --name NAME --warmup W --procs R --threads T [--precision P]
      the same JSON line from an mtf run's metrics.jsonl (one line per step: train.log_every 1)
  bench_peers.py table --config X.yaml RESULTS.jsonl CEILINGS.tsv
      prints the table (tokens/s, mtf/PyTorch, % of the 2-core sgemm ceiling) and the setups skipped
  bench_peers.py info
      one line on this python's torch: version, CPU capability its kernels dispatch to (AVX2, AVX512, ...),
      oneDNN and BLAS, and whether it reports bf16 (oneDNN, AVX512-BF16) and AMX support and torch.compile
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
import re
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


UNAVAILABLE = 3  # the exit status of a setup this torch lacks


def torch_setup_name(torch, args):
    kind = ("compile " if args.compile else "") + ("bf16 autocast" if args.precision == "bf16" else "fp32")
    where = (f"DDP {args.procs} x {args.threads} (gloo)" if args.procs > 1 else
             f"1 process x {args.threads} thread{'s' if args.threads > 1 else ''}")
    return f"PyTorch {torch.__version__}, {kind}, {where}"


def torch_unavailable(torch, args):
    """Why this torch cannot run the setup, or None."""
    if args.precision == "bf16" and not hasattr(torch, "autocast"):
        return f"bf16 autocast needs torch.autocast (PyTorch 1.10+); this is torch {torch.__version__}"
    if args.compile and not hasattr(torch, "compile"):
        return f"torch.compile needs PyTorch 2.0+; this is torch {torch.__version__}"
    return None


def torch_record(torch, args, m, **fields):
    return dict(setup=torch_setup_name(torch, args), side="pytorch", torch=torch.__version__, procs=args.procs,
                threads=args.threads, precision=args.precision, compile=args.compile, **fields)


def torch_train(rank, args, m, procs, out_path):
    import contextlib
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
    if args.compile:
        model = torch.compile(model)  # after DDP, as PyTorch's DDP docs have it: graphs split at its buckets

    def autocast():
        if args.precision == "bf16":
            return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()
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
        with autocast():
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
        record = torch_record(torch, args, m, step_ms=timed, load=load, median_ms=median,
                              tokens_per_s=m["batch"] * m["length"] / (median / 1e3), params=param_count(m),
                              loss_first=losses[0], loss_last=losses[-1])
        with open(out_path, "w") as f:
            f.write(json.dumps(record) + "\n")


def cmd_torch(args):
    m = load_model(args.config)
    out_path = args.out or "/dev/stdout"
    import torch
    why = torch_unavailable(torch, args)
    if why:
        print(f"bench_peers: {torch_setup_name(torch, args)}: unavailable: {why}", file=sys.stderr)
        with open(out_path, "w") as f:
            f.write(json.dumps(torch_record(torch, args, m, skipped=why)) + "\n")
        sys.exit(UNAVAILABLE)
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
                          precision=args.precision, median_ms=median,
                          tokens_per_s=m["batch"] * m["length"] / (median / 1e3), loss_first=steps[0][2],
                          loss_last=steps[-1][2])))


# ---- the table ----

def cmd_table(args):
    m = load_model(args.config)
    rows = []  # one per setup, its rounds pooled: every timed step, the loads its runs started under
    skipped = {}  # setup -> why it did not run (this torch lacks it, or no python has that torch)
    rounds = []  # per round (a setup's k-th run is in round k): setup -> (side, median ms of that run)
    for line in open(args.results):
        if not line.strip():
            continue
        r = json.loads(line)
        if "skipped" in r:
            skipped.setdefault(r["setup"], r["skipped"])
            continue
        k = sum(1 for run in rounds if r["setup"] in run)
        if k == len(rounds):
            rounds.append({})
        rounds[k][r["setup"]] = (r["side"], statistics.median(r["step_ms"]))
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
    # mtf's rows first, then PyTorch's by version; each in the order it ran.
    rows.sort(key=lambda row: (row["side"] != "mtf", version_key(row.get("torch", ""))))
    # fp32 rows against the sgemm ceiling, bf16 rows against the bf16 matmul's (where it was measured)
    ceiling = max(g for label, (g, _) in ceilings.items() if not label.startswith("bf16")) * 1e9
    bf16_ceilings = [g for label, (g, _) in ceilings.items() if label.startswith("bf16")]
    ceiling_bf16 = max(bf16_ceilings) * 1e9 if bf16_ceilings else ceiling
    fpt = flops_per_token(m)
    torch_rows = [r for r in rows if r["side"] == "pytorch"]
    best_torch = max((r["tokens_per_s"] for r in torch_rows), default=0)
    print(f"model {os.path.basename(args.config)}: {param_count(m) / 1e6:.2f}M parameters, {m['layers']} layers, d_model {m['d_model']}, "
          f"{m['heads']} heads x {m['d_kv']}, d_ff {m['d_ff']}, vocab {m['vocab']}, T {m['length']}, "
          f"global batch {m['batch']} ({m['batch'] * m['length']} tokens/step), AdamW")
    print(f"model FLOPs per token {fpt / 1e6:.1f}M (6 N + 12 layers T heads d_kv, as mtf counts them)")
    for label, (g, text) in ceilings.items():
        print(f"ceiling, {label}: {text}")
    print(f"ceilings used for '% of peak': fp32 rows {ceiling / 1e9:.1f} GFLOP/s (sgemm), bf16 rows "
          f"{ceiling_bf16 / 1e9:.1f} GFLOP/s (bf16 matmul); each the higher of its two 2-core measurements")
    print()
    steps = {len(r["step_ms"]) for r in rows}
    print(f"ms/step: the median of {'/'.join(map(str, sorted(steps)))} timed steps after the warm-up, per setup; "
          "tokens/s = global batch x T / that median; x PyTorch: mtf's tokens/s over the best PyTorch setup's, and "
          "over the best of PyTorch's with the same processes x threads (1 x 2 against 1 x 2, 2 x 1 against DDP 2 x 1) "
          "and the same precision (fp32 against fp32, mtf bf16 against bf16 autocast, eager or compiled); % of peak: "
          "model FLOPs/s over the ceiling above; load at start: the 1-minute load average as each round's run "
          "started (2 cores: above 2 means other work shared them). Losses (first and last step of the rounds) are "
          "a sanity check only: PyTorch trains on uniform random ids, mtf on the synthetic shards.")
    cols = [("setup", 67), ("ms/step", 9), ("tokens/s", 9), ("x best PyTorch", 14), ("x PyTorch alike", 15),
            ("% of peak", 9), ("load at start", 13), ("loss first -> last", 18)]
    print("| " + " | ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(cols)) + " |")
    print("|" + "|".join("-" * (w + 2) for _, w in cols) + "|")
    for r in rows:
        alike = [t["tokens_per_s"] for t in torch_rows if t["procs"] == r.get("procs") and t["threads"] == r.get("threads")
                 and t.get("precision", "fp32") == r.get("precision", "fp32")]
        best = f"{r['tokens_per_s'] / best_torch:.2f}" if best_torch and r["side"] == "mtf" else ""
        same = f"{r['tokens_per_s'] / max(alike):.2f}" if alike and r["side"] == "mtf" else ""
        row_ceiling = ceiling_bf16 if r.get("precision", "fp32") == "bf16" else ceiling
        pct = f"{100 * fpt * r['tokens_per_s'] / row_ceiling:.1f}%"
        loss = f"{r['loss_first']:.3f} -> {r['loss_last']:.3f}"
        load = "/".join(f"{x:.1f}" for x in r["loads"])
        cells = [r["setup"], f"{r['median_ms']:.1f}", f"{r['tokens_per_s']:.0f}", best, same, pct, load, loss]
        print("| " + " | ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, (_, w)) in enumerate(zip(cells, cols)))
              + " |")
    if not torch_rows:
        print("(no PyTorch rows: see above)")
    # The same comparison round by round: a round's setups ran within a minute or two of each other, so a
    # machine whose speed changes between minutes (a shared host) weighs on both sides of each ratio alike.
    paired = []
    for run in rounds:
        mtf_ms = [ms for side, ms in run.values() if side == "mtf"]
        torch_ms = [ms for side, ms in run.values() if side == "pytorch"]
        if mtf_ms and torch_ms:
            paired.append(min(torch_ms) / min(mtf_ms))
    if paired:
        print(f"per round, the fastest mtf setup over the fastest PyTorch setup of the same round (medians of each "
              f"run's timed steps): {', '.join(f'{x:.2f}x' for x in paired)}; median {statistics.median(paired):.2f}x")
    for setup, why in skipped.items():
        print(f"not run: {setup}: {why}")


def version_key(version):
    """'2.15.0+cu132' -> (2, 15, 0): PyTorch's rows sorted by version, older first."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return tuple(int(x or 0) for x in match.groups()) if match else (0, 0, 0)


def cmd_info(args):
    """One line on this python's torch, for the header of the bench output: which ISA its kernels ran."""
    import torch
    config = torch.__config__.show()

    def config_value(prefix):
        for line in config.splitlines():
            line = line.strip(" -")
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        return None

    def probe(fn):
        try:
            return "yes" if fn() else "no"
        except Exception:  # this torch lacks the query
            return "n/a"

    cpu = getattr(torch.backends, "cpu", None)
    capability = (cpu.get_cpu_capability() if cpu and hasattr(cpu, "get_cpu_capability")
                  else config_value("CPU capability usage:")) or "?"
    onednn = (config_value("Intel(R) MKL-DNN") or config_value("Intel(R) oneDNN") or "?").split(" (")[0]
    blas = re.search(r"BLAS_INFO=([^,\s]+)", config)
    blas = blas.group(1) if blas else "?"
    tcpu = getattr(torch, "cpu", None)
    print(f"torch {torch.__version__} ({sys.executable}): CPU capability {capability}, "
          f"oneDNN {onednn} (available {probe(torch.backends.mkldnn.is_available)}), BLAS {blas}, "
          f"bf16 in oneDNN {probe(lambda: torch.ops.mkldnn._is_mkldnn_bf16_supported())}, "
          f"AVX512-BF16 {probe(lambda: tcpu._is_avx512_bf16_supported())}, "
          f"AMX tiles {probe(lambda: tcpu._is_amx_tile_supported())}, "
          f"torch.compile {'yes' if hasattr(torch, 'compile') else 'no (PyTorch 2.0+)'}, "
          f"bf16 autocast {'yes' if hasattr(torch, 'autocast') else 'no (PyTorch 1.10+)'}")


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
    t.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    t.add_argument("--compile", action="store_true")
    t.add_argument("--out")
    r = sub.add_parser("mtf")
    r.add_argument("run_dir")
    r.add_argument("--config", required=True)
    r.add_argument("--name", required=True)
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--procs", type=int, required=True)
    r.add_argument("--threads", type=int, required=True)
    r.add_argument("--load", type=float, default=0.0, help="the 1-minute load average when the run started")
    r.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="the run's backend.precision")
    b = sub.add_parser("table")
    b.add_argument("--config", required=True)
    b.add_argument("results")
    b.add_argument("ceilings")
    c = sub.add_parser("count")
    c.add_argument("--config", required=True)
    sub.add_parser("info")
    args = p.parse_args()
    {"torch": cmd_torch, "mtf": cmd_mtf, "table": cmd_table, "count": cmd_count, "info": cmd_info}[args.cmd](args)


if __name__ == "__main__":
    main()
