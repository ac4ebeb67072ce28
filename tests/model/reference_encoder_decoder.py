"""The encoder-decoder of reference_model.py (model.architecture: encoder_decoder), written from README.md's
model description and docs/DATA.md's seq2seq rows, not from the C code.

Rows: a shard with seq2seq marks (attribute seq2seq = 1, dataset seq2seq_examples [n, 3] of start,
answer_start, end) gives one row per example: the encoder input is the prompt tokens[start:answer_start],
the targets the answer tokens[answer_start:end], the decoder input the start token (the end-of-text id)
followed by the answer without its last token; each cut to T and padded with 0; weights 1 on the answer's
tokens. Unmarked shards: windows of T + 1 tokens (the decoder-only rule), prompt the first T/2 tokens,
answer the other T + 1 - T/2 (T/2 rounded down).

Model: bidirectional encoder self-attention, causal decoder self-attention, cross-attention (queries from
the decoder, keys/values from the encoder's final normed output, no mask, no position bias); positions
learned per stack (encoder/embed/wpe, decoder/embed/wpe), or a T5 relative bias table per stack
(encoder/relative_bias bidirectional, decoder/relative_bias causal) shared by the stack's layers, or
rotary queries and keys in the self-attentions (README "Attention options"), or none; loss
= sum(weights * per-token loss) / max(sum(weights), 1)."""
import math

import h5py
import numpy as np
import torch

import reference_model as ref


def rows_of(paths, length):
    encoder, decoder, targets, weights = [], [], [], []
    for path in paths:
        with h5py.File(path, "r") as f:
            tokens = f["tokens"][()].astype(np.int64)
            eot = int(f.attrs.get("eot_id", 0))
            if int(f.attrs.get("seq2seq", 0)) == 1:
                spans = [tuple(int(v) for v in row) for row in f["seq2seq_examples"][()]]
            else:
                spans = [(w * length, w * length + length // 2, w * length + length + 1)
                         for w in range((len(tokens) - 1) // length)]
        for start, answer_start, end in spans:
            prompt = tokens[start:answer_start][:length]
            answer = tokens[answer_start:end][:length]
            pad = lambda seq: np.concatenate([seq, np.zeros(length - len(seq), dtype=np.int64)])
            encoder.append(pad(prompt))
            targets.append(pad(answer))
            decoder.append(pad(np.concatenate([[eot], answer[:-1]])[:length]))
            weights.append(pad(np.ones(len(answer), dtype=np.int64)))
    return [torch.tensor(np.stack(x)) for x in (encoder, decoder, targets, weights)]


def relative_bias(model, p, name, bidirectional, length):
    """[heads, query, memory] bias of the stack's table."""
    table = p[name]
    index = torch.tensor([[ref.t5_bucket(m - q, bidirectional, model["relative_num_buckets"],
                                         model["relative_max_distance"]) for m in range(length)] for q in range(length)])
    return table[:, index]


def attend(model, p, prefix, h, memory, causal, bias, rotary=False):
    kv_heads = model.get("kv_heads", 0) or model["heads"]
    q = torch.einsum("bld,dhk->bhlk", h, p[prefix + "/wq"])  # the scale 1/sqrt(d_kv) is in wq
    k = torch.einsum("bld,dhk->bhlk", memory, p[prefix + "/wk"])
    v = torch.einsum("bld,dhk->bhlk", memory, p[prefix + "/wv"])
    if rotary:  # self-attention only: queries and keys rotated by their positions
        q, k = ref.rotary(q), ref.rotary(k)
    group = model["heads"] // kv_heads  # query head i reads key/value head i // group
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2)
    if bias is not None:
        scores = scores + bias
    if causal:
        length = h.shape[1]
        scores = scores.masked_fill(~torch.ones(length, length).tril().bool(), float("-inf"))
    o = torch.softmax(scores, -1) @ v
    return torch.einsum("bhlk,hkd->bld", o, p[prefix + "/wo"])


def stack(model, p, name, x, layers, memory):
    position = model.get("position", "learned")
    length = x.shape[1]
    if position == "learned":
        x = x + p[name + "/embed/wpe"][:length]
    bias = relative_bias(model, p, name + "/relative_bias", memory is None, length) \
        if position == "relative_bias" else None
    for layer in range(layers):
        prefix = "%s/layer_%03d/" % (name, layer)
        x = x + attend(model, p, prefix + "attn", ref.norm(x, p, prefix + "attn", model["norm"]),
                       ref.norm(x, p, prefix + "attn", model["norm"]), memory is not None, bias, position == "rotary")
        if memory is not None:
            h = ref.norm(x, p, prefix + "cross_attn", model["norm"])
            x = x + attend(model, p, prefix + "cross_attn", h, memory, False, None)
        x = x + ref.feed_forward(ref.norm(x, p, prefix + "mlp", model["norm"]), p, prefix + "mlp", model["activation"])
    return ref.norm(x, p, name + "/final", model["norm"])


def losses(config, p, shards):
    model = config["model"]
    encoder_in, decoder_in, targets, weights = rows_of(shards, model["length"])
    wte = p["embed/wte"]
    encoder_wte = wte if model.get("shared_embeddings", True) else p["encoder/embed/wte"]
    encoder_layers = model.get("encoder_layers", 0) or model["layers"]
    decoder_layers = model.get("decoder_layers", 0) or model["layers"]
    memory = stack(model, p, "encoder", encoder_wte[encoder_in], encoder_layers, None)
    h = stack(model, p, "decoder", wte[decoder_in], decoder_layers, memory)
    logits = h @ wte.T / math.sqrt(model["d_model"]) if model["tie_embeddings"] else h @ p["unembed/w"]
    logp = torch.log_softmax(logits, -1)
    xent = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    eps = config["train"].get("label_smoothing", 0)
    lse = torch.logsumexp(logits, -1)
    train = (1 - eps) * xent + eps * (-logp).mean(-1) + model["z_loss"] * lse ** 2
    w = weights.double()
    count = max(w.sum().item(), 1.0)
    right = ((logits.argmax(-1) == targets) | (weights == 0)).all(-1)
    return {"windows": encoder_in.shape[0], "xent": ((xent * w).sum() / count).item(),
            "train": ((train * w).sum() / count).item(), "exact_match": right.double().mean().item()}
