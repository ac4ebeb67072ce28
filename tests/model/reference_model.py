#!/usr/bin/python3
"""An independent double-precision PyTorch implementation of mtf's decoder-only model, written from the
model description in README.md (the config reference and "The model:"), not from the C code. It reads a
checkpoint with h5py (the parameters and the config saved in it) and token shards, and prints, as JSON,
the mean over every window of the shards of:
  xent:  -log_softmax(logits)[target]                                    (what `mtf eval` reports)
  train: (1-eps) xent + eps mean_v(-log_softmax(logits)[v]) + z_loss lse^2  (the training loss, with
         eps = train.label_smoothing and lse = logsumexp of the logits)
Windows follow the shard rule: a shard of n tokens holds floor((n-1)/T) windows of T+1 tokens starting at
0, T, 2T, ...; inputs are the first T tokens, targets the last T.
Packed sequences (data.pack, README and docs/DATA.md): each window's T+1 tokens get document ids, from the
shard's `segments` dataset (segments) or counted through the end-of-text ids (eot: a document ends with its
eot); a document is a run of equal non-zero ids, 0 is padding. A query attends only to earlier keys of its
own document, learned positions count from each document's first token, and the means above are over the
positions whose input and target are both documents' tokens (with train.loss_skip_document_start, of the
same document), summed over all windows and divided by their number.

usage: reference_model.py CHECKPOINT SHARD..."""
import json
import math
import sys

import h5py
import numpy as np
import torch
import yaml

torch.set_default_dtype(torch.float64)


def load(path):
    with h5py.File(path, "r") as f:
        config = yaml.safe_load(f.attrs["config"].decode())
        params = {}
        for ds in f["variables"].values():
            if ds.attrs["kind"] in (b"parameter", "parameter"):
                name = ds.attrs["variable"]
                name = name.decode() if isinstance(name, bytes) else str(name)
                params[name] = torch.tensor(ds[()].astype(np.float64))
    return config, params


def windows(paths, length, pack="none"):
    """The windows' tokens and their document ids (all 1 without packing)."""
    rows, docs = [], []
    for path in paths:
        with h5py.File(path, "r") as f:
            tokens = f["tokens"][()].astype(np.int64)
            segments = f["segments"][()].astype(np.int64) if pack == "segments" else None
            eot = int(f.attrs["eot_id"]) if "eot_id" in f.attrs else -1
        for w in range((len(tokens) - 1) // length):
            window = tokens[w * length: w * length + length + 1]
            rows.append(window)
            if pack == "segments":
                docs.append(segments[w * length: w * length + length + 1])
            elif pack == "eot":  # the eot belongs to the document it ends
                docs.append(1 + np.concatenate([[0], np.cumsum(window[:-1] == eot)]))
            else:
                docs.append(np.ones(length + 1, dtype=np.int64))
    return torch.tensor(np.stack(rows)), torch.tensor(np.stack(docs))


def documents(ids):
    """Per window: a number for each run of equal ids (0 kept for padding) and each token's offset in its run."""
    runs, positions = torch.zeros_like(ids), torch.zeros_like(ids)
    for r in range(ids.shape[0]):
        run, start = 0, 0
        for t in range(ids.shape[1]):
            if t == 0 or ids[r, t] != ids[r, t - 1]:
                start = t
                run += 1
            runs[r, t] = run if ids[r, t] != 0 else 0
            positions[r, t] = t - start
    return runs, positions


def norm(x, p, prefix, kind):
    """RMS norm x / sqrt(mean x^2 + 1e-6) * scale, or layer norm (x - mean) / sqrt(var + 1e-6) * scale + bias."""
    if kind == "layer":
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt((centred ** 2).mean(-1, keepdim=True) + 1e-6) * p[prefix + "/norm_scale"] \
            + p[prefix + "/norm_bias"]
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6) * p[prefix + "/norm_scale"]


def gelu(x):  # the tanh approximation
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def feed_forward(h, p, prefix, activation):
    if activation in ("swiglu", "geglu"):  # act(h wi_0) * (h wi_1), act = swish or gelu
        gate = h @ p[prefix + "/wi_0"]
        gate = gate * torch.sigmoid(gate) if activation == "swiglu" else gelu(gate)
        hidden = gate * (h @ p[prefix + "/wi_1"])
    else:
        pre = h @ p[prefix + "/wi"]
        hidden = torch.relu(pre) if activation == "relu" else gelu(pre)
    return hidden @ p[prefix + "/wo"]


def t5_bucket(relative, bidirectional, num_buckets, max_distance):
    """README "Attention options": the bucket of memory position - query position."""
    n, bucket = -relative, 0
    if bidirectional:
        num_buckets //= 2
        bucket += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    large = exact + int(math.floor(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact)))
    return bucket + min(large, num_buckets - 1)


def relative_bias(model, p, length, positions=None):
    """[heads, query, memory]: the shared table at each pair's bucket; packed ([batch, heads, query, memory]),
    of the difference of the positions in the documents."""
    def buckets(pos):
        return torch.tensor([[t5_bucket(int(pos[m] - pos[q]), False, model["relative_num_buckets"],
                                        model["relative_max_distance"]) for m in range(length)] for q in range(length)])
    if positions is None:
        return p["relative_bias/decoder"][:, buckets(list(range(length)))]
    return torch.stack([p["relative_bias/decoder"][:, buckets(row.tolist())] for row in positions])


def rotary(x, positions=None):
    """RoPE, halves form: x cos(p theta) + rotate_half(x) sin(p theta), x [batch, heads, length, d]; p the
    position in the sequence, or packed [batch, length] in the document."""
    length, d = x.shape[-2], x.shape[-1]
    theta = torch.tensor([10000.0 ** (-2 * (i % (d // 2)) / d) for i in range(d)])
    if positions is None:
        angle = torch.arange(length, dtype=torch.float64)[:, None] * theta[None, :]
    else:
        angle = positions.double()[:, None, :, None] * theta
    rotated = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * torch.cos(angle) + rotated * torch.sin(angle)


def logits_of(model, p, tokens, runs=None, positions=None):
    """Packed (runs, positions [batch, length]): a query sees its own document's earlier keys only, and
    positions (learned, rotary, relative) count from each document's first token."""
    length = tokens.shape[1]
    position = model.get("position", "learned")
    x = p["embed/wte"][tokens]
    if position == "learned":
        x = x + (p["embed/wpe"][:length] if positions is None else p["embed/wpe"][positions])
    causal = torch.ones(length, length).tril().bool()
    if runs is not None:
        causal = (causal & (runs[:, :, None] == runs[:, None, :]))[:, None]  # [batch, heads (1), query, key]
    heads = model["heads"]
    kv_heads = model.get("kv_heads", 0) or heads
    bias = relative_bias(model, p, length, positions) if position == "relative_bias" else 0
    for layer in range(model["layers"]):
        prefix = "layer_%03d/attn" % layer
        h = norm(x, p, prefix, model["norm"])
        q = torch.einsum("bld,dhk->bhlk", h, p[prefix + "/wq"])  # the scale 1/sqrt(d_kv) is in wq
        k = torch.einsum("bld,dhk->bhlk", h, p[prefix + "/wk"])  # [batch, kv_heads, length, d_kv]
        v = torch.einsum("bld,dhk->bhlk", h, p[prefix + "/wv"])
        if position == "rotary":
            q, k = rotary(q, positions), rotary(k, positions)
        # query head i uses K/V head floor(i * kv_heads / heads)
        group = torch.tensor([i * kv_heads // heads for i in range(heads)])
        k, v = k[:, group], v[:, group]
        scores = (q @ k.transpose(-1, -2) + bias).masked_fill(~causal, float("-inf"))
        o = torch.softmax(scores, -1) @ v
        x = x + torch.einsum("bhlk,hkd->bld", o, p[prefix + "/wo"])
        prefix = "layer_%03d/mlp" % layer
        x = x + feed_forward(norm(x, p, prefix, model["norm"]), p, prefix, model["activation"])
    h = norm(x, p, "final", model["norm"])
    if model["tie_embeddings"]:
        return h @ p["embed/wte"].T / math.sqrt(model["d_model"])
    return h @ p["unembed/w"]


def main(checkpoint, shards):
    config, p = load(checkpoint)
    model = config["model"]
    if model.get("moe.experts", 0):
        sys.exit("reference_model.py: mixture-of-experts layers are not implemented here")
    if model.get("architecture", "decoder") == "encoder_decoder":
        import reference_encoder_decoder  # beside this file, on sys.path as the script's directory
        print(json.dumps(reference_encoder_decoder.losses(config, p, shards)))
        return
    pack = config.get("data", {}).get("pack", "none")
    rows, ids = windows(shards, model["length"], pack)
    targets = rows[:, 1:]
    if pack == "none":
        logits = logits_of(model, p, rows[:, :-1])
        counted = torch.ones(targets.shape)
    else:
        runs, positions = documents(ids)
        logits = logits_of(model, p, rows[:, :-1], runs[:, :-1], positions[:, :-1])
        counted = ((runs[:, :-1] != 0) & (runs[:, 1:] != 0)).double()
        if config["train"].get("loss_skip_document_start", False):
            counted = counted * (runs[:, :-1] == runs[:, 1:]).double()
    logp = torch.log_softmax(logits, -1)
    xent = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    eps = config["train"].get("label_smoothing", 0)
    lse = torch.logsumexp(logits, -1)
    train = (1 - eps) * xent + eps * (-logp).mean(-1) + model["z_loss"] * lse ** 2
    n = counted.sum()
    print(json.dumps({"windows": rows.shape[0], "xent": ((xent * counted).sum() / n).item(),
                      "train": ((train * counted).sum() / n).item(), "counted": int(n.item())}))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
