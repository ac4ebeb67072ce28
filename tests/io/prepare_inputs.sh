#!/usr/bin/env bash
# `mtf data prepare` on links, globs and many inputs (tests/io/CMakeLists.txt checks the output).
# Each run makes its own tree under DIR (removed first):
#   DIR/real/   a.txt b.txt skip.bin (binary) sub/c.txt sub/d.txt
#   DIR/links/  a.txt -> ../real/a.txt    a.u8 -> a.txt (a link to a file read already, like Debian's fortunes)
#               b.txt -> ../real/b.txt    bin -> ../real/skip.bin (a link to a binary file)
#               broken -> ../real/missing deep/back -> .. (a cycle through a subdirectory)
#               loop -> . (a cycle)       sub -> ../real/sub (a link to a directory)
#   DIR/many/   f000.txt ... (with `many`)
# usage: prepare_inputs.sh links MTF DIR     prepares DIR/real and DIR/links; their shards' tokens must match
#        prepare_inputs.sh glob MTF DIR PATTERN  prepares --input 'DIR/PATTERN', the glob left to mtf
#        prepare_inputs.sh many MTF DIR N    prepares N files, each given with its own --input
set -u
mode=$1 mtf=$2 dir=$3
rm -rf "$dir"
mkdir -p "$dir/real/sub" "$dir/links/deep" || exit 2
printf 'alpha: the first document\n' >"$dir/real/a.txt"
printf 'bravo: the second one, a little longer\n' >"$dir/real/b.txt"
printf 'charlie, in a subdirectory\n' >"$dir/real/sub/c.txt"
printf 'delta\n' >"$dir/real/sub/d.txt"
printf 'bin\000ary\n' >"$dir/real/skip.bin"
ln -s ../real/a.txt "$dir/links/a.txt"
ln -s a.txt "$dir/links/a.u8"
ln -s ../real/b.txt "$dir/links/b.txt"
ln -s ../real/skip.bin "$dir/links/bin"
ln -s ../real/missing "$dir/links/broken"
ln -s .. "$dir/links/deep/back"
ln -s . "$dir/links/loop"
ln -s ../real/sub "$dir/links/sub"

# Every shard's tokens as h5dump prints them, without the file name.
tokens() {
  local shard
  for shard in "$1"/train-*.h5 "$1"/val-*.h5; do
    [ -e "$shard" ] || continue
    echo "${shard##*/}"
    h5dump -d tokens "$shard" | tail -n +2 || return 1
  done
}

case "$mode" in
  links)
    "$mtf" data prepare --input "$dir/real" --output "$dir/out-real" --shard-tokens 40 --val-fraction 0.2 || exit 1
    "$mtf" data prepare --input "$dir/links" --output "$dir/out-links" --shard-tokens 40 --val-fraction 0.2 || exit 1
    real=$(tokens "$dir/out-real") && links=$(tokens "$dir/out-links") || exit 1
    if [ -z "$real" ] || [ "$real" != "$links" ]; then
      echo "prepare_inputs.sh: the shards of DIR/links differ from those of DIR/real"
      diff <(printf '%s\n' "$real") <(printf '%s\n' "$links")
      exit 1
    fi
    echo "prepare_inputs.sh: the shards of DIR/links hold the same tokens as those of DIR/real ($(ls "$dir/out-links" | wc -l) shards)"
    ;;
  glob)
    exec "$mtf" data prepare --input "$dir/$4" --output "$dir/out" --force
    ;;
  many)
    mkdir -p "$dir/many" || exit 2
    inputs=()
    for ((i = 0; i < $4; i++)); do
      name=$(printf '%s/many/f%03d.txt' "$dir" "$i")
      printf 'document %d\n' "$i" >"$name"
      inputs+=(--input "$name")
    done
    exec "$mtf" data prepare "${inputs[@]}" --output "$dir/out" --force
    ;;
  *) echo "prepare_inputs.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
