#!/usr/bin/env bash
# Token shards and checkpoints stored compressed are read as the originals (issue 35): HDF5 allows any chunked
# layout with filters, and users compress to save space. Each shard rewritten by h5repack with gzip and by h5py
# with gzip and shuffle (small chunks) is inspected and trains 4 steps with the same losses as the original; the
# original run's checkpoint rewritten both ways verifies, evaluates to the same loss and resumes 2 more steps
# with the same losses. "Stored in full" is then a count of written chunks, not of bytes (which compression
# never reaches).
# usage: compressed_inputs.sh MTF CONFIG PYTHON WORKDIR
set -euo pipefail
mtf=$1 config=$2 python=$3 work=$4
skip() { echo "skipped: $1"; exit 77; }
"$python" -c 'import h5py' 2>/dev/null || skip "'$python' lacks h5py (tools/install-deps.sh --python)"
command -v h5repack > /dev/null || skip "no h5repack (Debian's hdf5-tools: tools/install-deps.sh)"
rm -rf "$work" && mkdir -p "$work"
run() { # name command...
  local name=$1; shift
  "$@" > "$work/$name.log" 2>&1 || { echo "FAIL $name:"; cat "$work/$name.log"; exit 1; }
}
losses() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl" | grep -E '^[0-9]+ '; }
stored_with() { # file word: h5dump's storage properties name it (no early-exit grep: pipefail)
  h5dump -p -H "$1" > "$work/h5dump.txt" && grep -c "$2" "$work/h5dump.txt" > /dev/null
}
same() { # what file-a file-b
  if ! cmp -s "$2" "$3"; then echo "FAIL $1: differ"; paste "$2" "$3"; exit 1; fi
  echo "ok   $1: $(wc -l < "$2") lines identical"
}

run synth "$mtf" data synth --task reverse --output "$work/plain" --examples 600 --length 12 --force
# h5py: every dataset of a file rewritten compressed (gzip, shuffle, chunks of `chunk` elements along the
# first dim), every attribute of every object kept.
cat > "$work/h5py_gzip.py" <<'EOF'
import sys, h5py
src, dst, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
with h5py.File(src, "r") as fin, h5py.File(dst, "w") as fout:
    def copy(group_in, group_out):
        for key, value in group_in.attrs.items():
            group_out.attrs[key] = value
        for name, item in group_in.items():
            if isinstance(item, h5py.Group):
                copy(item, group_out.create_group(name))
                continue
            data = item[()]
            if item.shape and item.size:
                chunks = (min(chunk, item.shape[0]),) + tuple(item.shape[1:])
                out = group_out.create_dataset(name, data=data, compression="gzip", shuffle=True, chunks=chunks)
            else:
                out = group_out.create_dataset(name, data=data)
            for key, value in item.attrs.items():
                out.attrs[key] = value
    copy(fin, fout)
EOF
mkdir -p "$work/gzip" "$work/shuffle"
for f in "$work"/plain/*.h5; do
  base=$(basename "$f")
  run "repack-$base" h5repack -f GZIP=6 "$f" "$work/gzip/$base"
  run "h5py-$base" "$python" "$work/h5py_gzip.py" "$f" "$work/shuffle/$base" 1000
done
stored_with "$work/gzip/train-00000.h5" DEFLATE || { echo "FAIL: h5repack wrote no gzip"; exit 1; }
stored_with "$work/shuffle/train-00000.h5" SHUFFLE || { echo "FAIL: h5py wrote no shuffle"; exit 1; }

common=("$config" --set train.steps=4 --set train.checkpoint_every=4 --set train.eval_every=0)
for kind in plain gzip shuffle; do
  run "inspect-$kind" "$mtf" data inspect "$work/$kind/train-*.h5"
  run "train-$kind" "$mtf" train "${common[@]}" --fresh --set "data.train=$work/$kind/train-*.h5" \
    --set "data.eval=$work/$kind/val-*.h5" --set "run.dir=$work/run-$kind"
  losses "$work/run-$kind" > "$work/losses-$kind"
done
same "shards rewritten by h5repack -f GZIP=6: 4 training steps" "$work/losses-plain" "$work/losses-gzip"
same "shards rewritten by h5py (gzip, shuffle, 1000-token chunks): 4 training steps" "$work/losses-plain" \
  "$work/losses-shuffle"

# The plain run's checkpoint, rewritten both ways into copies of its run directory.
ckpt=$(cd "$work/run-plain/checkpoints" && ls ckpt-*.h5 | tail -1)
data=(--set "data.train=$work/plain/train-*.h5" --set "data.eval=$work/plain/val-*.h5")
eval_loss() { grep -E '^\{"loss"' "$1" | sed -E 's/\{"loss": ([^,]+),.*/\1/'; }
run eval-plain "$mtf" eval "${common[@]}" "${data[@]}" --set "run.dir=$work/run-plain" --json
for kind in gzip shuffle; do
  cp -r "$work/run-plain" "$work/ckpt-$kind"
  rm "$work/ckpt-$kind/checkpoints/$ckpt"
  if [ "$kind" = gzip ]; then
    run "repack-ckpt" h5repack -f GZIP=6 "$work/run-plain/checkpoints/$ckpt" "$work/ckpt-$kind/checkpoints/$ckpt"
  else
    run "h5py-ckpt" "$python" "$work/h5py_gzip.py" "$work/run-plain/checkpoints/$ckpt" \
      "$work/ckpt-$kind/checkpoints/$ckpt" 16
  fi
  stored_with "$work/ckpt-$kind/checkpoints/$ckpt" DEFLATE || { echo "FAIL: $kind checkpoint not compressed"; exit 1; }
  run "verify-$kind" "$mtf" ckpt verify "$work/ckpt-$kind/checkpoints/$ckpt"
  run "eval-$kind" "$mtf" eval "${common[@]}" "${data[@]}" --set "run.dir=$work/ckpt-$kind" --json
  a=$(eval_loss "$work/eval-plain.log") b=$(eval_loss "$work/eval-$kind.log")
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL checkpoint rewritten ($kind): eval loss $b, original $a"; exit 1; }
  echo "ok   checkpoint rewritten ($kind): verifies, eval loss $b as the original's"
done
# Resumed for 2 more steps: from the original and from each rewritten checkpoint, the same losses.
for kind in plain gzip shuffle; do
  dir="$work/ckpt-$kind"
  if [ "$kind" = plain ]; then cp -r "$work/run-plain" "$work/resume-plain" && dir="$work/resume-plain"; fi
  run "resume-$kind" "$mtf" train "$config" --set train.steps=6 --set train.checkpoint_every=0 \
    --set train.eval_every=0 "${data[@]}" --set "run.dir=$dir"
  if ! grep -c "checkpoint: resumed from" "$work/resume-$kind.log" > /dev/null; then
    echo "FAIL: the $kind run did not resume"; cat "$work/resume-$kind.log"; exit 1
  fi
  losses "$dir" | awk '$1 > 4' > "$work/resumed-$kind"
done
if [ "$(wc -l < "$work/resumed-plain")" != 2 ]; then echo "FAIL: 2 resumed steps expected"; cat "$work/resumed-plain"; exit 1; fi
same "resumed from the h5repack-compressed checkpoint: 2 steps" "$work/resumed-plain" "$work/resumed-gzip"
same "resumed from the h5py-compressed checkpoint: 2 steps" "$work/resumed-plain" "$work/resumed-shuffle"
echo "all checks passed"
