#!/usr/bin/env python3
"""Text files -> mtf token shards with a real tokenizer (Hugging Face `tokenizers`).

    tools/prepare_tokenized.py --input DIR --output DIR (--tokenizer tokenizer.json | --train-bpe N)

The same inputs, split and shard files as `mtf data prepare` (docs/DATA.md), walked by the same rules as its
src/io/prepare.c: each input file is one document followed by the end-of-text id; --input may be given any
number of times and is a file, a directory or a glob (a path that exists is taken literally; otherwise a name
with *, ? or [ is expanded, sorted, and a pattern that matches nothing is an error). A directory is walked in
sorted order, hidden entries left out. Symbolic links are followed, to files and to directories. Inside a
directory and among a glob's matches, binary files (a NUL byte in the first 4 KiB) and broken links (each
named on stderr) are skipped; files named with --input are always read. Every file and directory is taken
once, by its device and inode: a link to a file already read, a hard link or an input given twice is skipped,
and a directory reached again (a link cycle) is not walked again. The summary counts what was skipped.
Documents go whole to val while val holds no more than --val-fraction of the tokens so far.

  --tokenizer FILE   load a Hugging Face tokenizer.json (GPT-2's, Llama's, one trained before, ...)
  --train-bpe N      train a byte-level BPE of N ids (the end-of-text token <|endoftext|> is id 0) on the
                     inputs; it is saved as OUTPUT/tokenizer.json, so --tokenizer can reuse it

Every shard carries the tokenizer's name (attribute `tokenizer`) and its decode table (datasets
`decode_offsets`, `decode_bytes`: id -> bytes), which `mtf train` copies into its checkpoints so that
`mtf generate` prints text. The table is checked against the tokenizer's own decode on sample documents;
a tokenizer whose tokens cannot be decoded one by one gets no table (mtf generate then prints ids).

Text is encoded in parallel (all cores; --threads N to limit) with a progress line on stderr. Invalid
UTF-8 in an input is replaced by U+FFFD (counted in the summary).

`--encode TEXT --tokenizer FILE` prints TEXT's ids (for `mtf generate --prompt-ids`). `--list-inputs` prints
the files the inputs give, one a line in the order they would be read, and what was skipped, and writes
nothing (it needs none of the packages below).

Needs the Python packages tokenizers, h5py and numpy: `bash tools/install-deps.sh --python` puts them in
.venv (Debian's python3 with its h5py/numpy, plus tokenizers from PyPI; MTF_VENV=DIR, as there, names another
directory). This script re-runs itself with .venv/bin/python, same arguments, when the interpreter that started
it lacks them; where there is no such .venv, or it lacks them too, it says what to run and exits with status 1.
"""
import argparse
import glob
import importlib
import json
import os
import shutil
import stat
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, os.environ.get("MTF_VENV") or ".venv")  # as tools/install-deps.sh: relative to ROOT
VENV_PYTHON = os.path.join(VENV, "bin", "python")
PACKAGES = ("tokenizers", "h5py", "numpy")
EOT_TRAINED = "<|endoftext|>"
EOT_CANDIDATES = [EOT_TRAINED, "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]"]
VOCAB_PAD = 128  # vocab_size is rounded up to a multiple of this, as the byte tokenizer's 384
NAME_MAX = 63  # mtf reads tokenizer names of up to 63 characters


def fail(message):
    sys.exit(f"prepare_tokenized: error: {message}")


def shown(path):
    """path as it can be typed here: relative to the current directory when under it, else absolute."""
    relative = os.path.relpath(path)
    return path if relative == ".." or relative.startswith(".." + os.sep) else relative


def missing_packages():
    missing = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError as e:
            missing.append(name if isinstance(e, ModuleNotFoundError) and e.name == name else f"{name} ({e})")
    return missing


def import_packages():
    """Makes sure tokenizers, h5py and numpy import. When this interpreter lacks one, the script runs again,
    with the same arguments, under .venv's Python (unless this is it, or that was tried already); otherwise
    it says what to run and exits with status 1."""
    missing = missing_packages()
    if not missing:
        return
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(VENV)  # not the executable: a venv's is a link
    if os.path.exists(VENV_PYTHON) and not in_venv and not os.environ.get("MTF_PREPARE_REEXEC"):
        os.environ["MTF_PREPARE_REEXEC"] = "1"
        try:
            os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
        except OSError as e:
            fail(f"cannot run {shown(VENV_PYTHON)} ({e.strerror}): remove {shown(VENV)} and run "
                 f"`bash {shown(os.path.join(ROOT, 'tools', 'install-deps.sh'))} --python` to make it again")
    lacking = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
    install = f"`bash {shown(os.path.join(ROOT, 'tools', 'install-deps.sh'))} --python`"
    if in_venv or os.environ.get("MTF_PREPARE_REEXEC"):
        fail(f"prepare_tokenized.py needs the Python packages tokenizers, h5py and numpy; the Python of "
             f"{shown(VENV)} ({sys.executable}) lacks {lacking}: run {install} (it installs them into "
             f"{shown(VENV)}), then run this command again")
    fail(f"prepare_tokenized.py needs the Python packages tokenizers, h5py and numpy; {sys.executable} lacks "
         f"{lacking} and there is no {shown(VENV_PYTHON)} to run it with: run {install} (it makes {shown(VENV)} "
         f"with them), then run this command again")


# ---- inputs (the rules of src/io/prepare.c: mtf data prepare takes the same files in the same order) ----

class Inputs:
    """The files the --input arguments give, in order, with their sizes, and counts of what was skipped."""

    SKIPS = (("binary_files", "binary file", "binary files"),
             ("repeated_files", "file already read", "files already read"),
             ("repeated_dirs", "directory already walked", "directories already walked"),
             ("broken_links", "broken link", "broken links"),
             ("not_files", "neither file nor directory", "neither files nor directories"))

    def __init__(self):
        self.files = []  # (path, size)
        self.seen = set()  # (st_dev, st_ino) of every file and directory taken
        self.skipped = {key: 0 for key, _, _ in self.SKIPS}

    def add_input(self, given):
        """One --input: a path that exists is taken literally; otherwise a name with *, ? or [ is a glob,
        expanded in sorted order (hidden names only where the pattern has the dot), each match taken as a
        directory's entry is. A pattern that matches nothing is an error."""
        if os.path.lexists(given) or not any(c in given for c in "*?["):
            self.walk(given, True)
            return
        try:
            matches = sorted(glob.glob(python_glob(given)), key=os.fsencode)
        except OSError as e:
            fail(f"input '{given}': the pattern could not be expanded ({e.strerror})")
        if not matches:
            fail(f"input '{given}': no files match this pattern: check it (and that its directory exists)")
        for match in matches:
            if os.path.basename(match) not in (".", ".."):
                self.walk(match, False)

    def walk(self, path, named):
        """Lists path and what is under it, depth first in sorted order, as prepare.c's recursive walk:
        links are followed; a file or directory reached again is skipped; files found (not named) are
        skipped when binary. A stack, not recursion, so that no depth is too deep."""
        stack = [(path, named)]
        while stack:
            path, named = stack.pop()
            try:
                info = os.stat(path)
            except OSError as e:
                self.unreadable(path, named, e)
                continue
            is_file, is_dir = stat.S_ISREG(info.st_mode), stat.S_ISDIR(info.st_mode)
            if not is_file and not is_dir:
                if named:
                    fail(f"input '{path}' is neither a file nor a directory")
                self.skipped["not_files"] += 1
                continue
            if is_file and not named and looks_binary(path):
                self.skipped["binary_files"] += 1
                continue
            key = (info.st_dev, info.st_ino)
            if key in self.seen:
                self.skipped["repeated_files" if is_file else "repeated_dirs"] += 1
                continue
            self.seen.add(key)
            if is_file:
                self.files.append((path, info.st_size))
                continue
            try:
                names = sorted(os.listdir(path), key=os.fsencode)
            except OSError as e:
                fail(f"input directory '{path}': {e.strerror}")
            stack.extend((os.path.join(path, name), False) for name in reversed(names) if not name.startswith("."))

    def unreadable(self, path, named, error):
        """A path stat() cannot follow: a broken link found in a directory or by a glob is skipped, named on
        stderr; a broken link named with --input, and anything else, is an error."""
        try:
            target = os.readlink(path)
        except OSError:
            fail(f"input '{path}': {error.strerror}: check the path")
        if named:
            fail(f"input '{path}' is a link to '{target}', which cannot be read ({error.strerror}): fix the link "
                 f"or give its target")
        print(f"prepare_tokenized: skipped the broken link '{path}' -> '{target}' ({error.strerror})", file=sys.stderr)
        self.skipped["broken_links"] += 1

    def skipped_text(self):
        """What was skipped, worded as mtf data prepare's summary: "1 binary file, 2 files already read"."""
        parts = [f"{self.skipped[key]} {one if self.skipped[key] == 1 else many}"
                 for key, one, many in self.SKIPS if self.skipped[key]]
        return ", ".join(parts) or "none"


def python_glob(pattern):
    """A glob(3) pattern (prepare.c's) in the syntax of Python's glob module: outside brackets a backslash
    takes the next character literally, and [^...] is a negated class as [!...] is."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(glob.escape(pattern[i + 1]))
            i += 2
            continue
        if c == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] in "!^":
                j += 1
            if j < len(pattern) and pattern[j] == "]":  # a ] first in the class is one of its characters
                j += 1
            end = pattern.find("]", j)
            if end >= 0:
                body = pattern[i + 1:end]
                out.append("[" + ("!" + body[1:] if body.startswith("^") else body) + "]")
                i = end + 1
                continue
            out.append("[[]")  # no closing bracket: a literal [
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def list_inputs(given):
    """The Inputs of the --input arguments; none of their files being text is an error."""
    inputs = Inputs()
    for path in given:
        inputs.add_input(path)
    if not inputs.files:
        fail(f"no text files found in the inputs (skipped: {inputs.skipped_text()})")
    return inputs


def looks_binary(path):
    try:
        with open(path, "rb") as f:
            return b"\0" in f.read(4096)
    except OSError:
        return False  # reading it later reports the error


def read_text(path, bad_utf8):
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        bad_utf8[0] += 1
        return data.decode("utf-8", errors="replace")


def prepare_output(directory, force):
    os.makedirs(directory, exist_ok=True)
    old = sorted(n for n in os.listdir(directory)
                 if (n.startswith("train-") or n.startswith("val-")) and n.endswith(".h5"))
    if old and not force:
        fail(f"output directory '{directory}' already holds shards ({old[0]}): they would mix with the new ones; "
             f"choose another directory or pass --force to replace them")
    for name in old:
        os.unlink(os.path.join(directory, name))


# ---- the tokenizer and its decode table ----

def bytes_to_unicode():
    """GPT-2's byte <-> printable character map, which byte-level BPE tokens are written in."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def decoder_kinds(spec):
    kinds, replaces = set(), []
    stack = [spec.get("decoder")]
    while stack:
        d = stack.pop()
        if not d:
            continue
        kinds.add(d.get("type"))
        stack.extend(d.get("decoders") or [])
        if d.get("type") == "Replace":
            replaces.append((d.get("pattern", {}).get("String"), d.get("content")))
    return kinds, replaces


def token_bytes(tok, i, kinds, replaces, byte_decoder):
    piece = tok.id_to_token(i)
    if piece is None:
        return b""
    if "ByteLevel" in kinds and all(c in byte_decoder for c in piece):
        return bytes(byte_decoder[c] for c in piece)
    if "ByteFallback" in kinds and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    if "Metaspace" in kinds or any(p == "▁" for p, _ in replaces):
        return piece.replace("▁", " ").encode("utf-8")
    if "WordPiece" in kinds:
        return (piece[2:] if piece.startswith("##") else " " + piece).encode("utf-8")
    return tok.decode([i], skip_special_tokens=True).encode("utf-8")


def decode_table(tok, vocab_size):
    """id -> bytes for ids 0..vocab_size-1 (special tokens and padding ids: no bytes)."""
    spec = json.loads(tok.to_str())
    kinds, replaces = decoder_kinds(spec)
    added = tok.get_added_tokens_decoder()
    byte_decoder = bytes_to_unicode()
    real = tok.get_vocab_size(with_added_tokens=True)
    table = []
    for i in range(vocab_size):
        if i >= real:
            table.append(b"")
        elif i in added:
            table.append(b"" if added[i].special else added[i].content.encode("utf-8"))
        else:
            table.append(token_bytes(tok, i, kinds, replaces, byte_decoder))
    return table


def verify_table(tok, table, samples):
    """Compares the table's decode with the tokenizer's on sample documents: 'exact', 'leading-space' (only
    a document's leading whitespace differs, as Metaspace and WordPiece decoders strip it) or a reason."""
    loose = False
    for ids in samples:
        mine = b"".join(table[i] for i in ids)
        theirs = tok.decode(ids, skip_special_tokens=True).encode("utf-8")
        if mine == theirs:
            continue
        if mine.lstrip() == theirs.lstrip():
            loose = True
            continue
        at = next((k for k in range(min(len(mine), len(theirs))) if mine[k] != theirs[k]), min(len(mine), len(theirs)))
        return f"table decode {mine[max(0, at - 20):at + 20]!r} != tokenizer decode {theirs[max(0, at - 20):at + 20]!r}"
    return "leading-space" if loose else "exact"


def load_tokenizer(path):
    from tokenizers import Tokenizer
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises plain Exceptions for unreadable files
        fail(f"cannot load tokenizer '{path}': {e}")


def tokenizer_name(args, tok):
    if args.name:
        name = args.name
    elif args.train_bpe:
        name = f"bpe-bytelevel-{args.train_bpe}"
    else:
        stem = os.path.splitext(os.path.basename(args.tokenizer))[0]
        parent = os.path.basename(os.path.dirname(os.path.abspath(args.tokenizer)))
        name = parent if stem == "tokenizer" and parent else stem
    name = "".join(c if 32 < ord(c) < 127 else "_" for c in name)[:NAME_MAX]
    return name or "tokenizer"


def find_eot(tok, wanted):
    if wanted:
        i = tok.token_to_id(wanted)
        if i is None:
            fail(f"--eot '{wanted}' is not a token of the tokenizer")
        return i
    for candidate in EOT_CANDIDATES:
        i = tok.token_to_id(candidate)
        if i is not None:
            return i
    fail(f"the tokenizer has none of the usual end-of-text tokens ({', '.join(EOT_CANDIDATES)}): name its "
         f"end-of-text token with --eot TOKEN")


def train_bpe(args, paths, bad_utf8):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.train_bpe, min_frequency=2, special_tokens=[EOT_TRAINED],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=args.progress and sys.stderr.isatty())
    t0 = time.time()
    tok.train_from_iterator((read_text(p, bad_utf8) for p in paths), trainer=trainer, length=len(paths))
    print(f"prepare_tokenized: trained a byte-level BPE of {tok.get_vocab_size()} ids on {len(paths)} files in "
          f"{time.time() - t0:.1f} s", file=sys.stderr)
    return tok


# ---- shards ----

class Sink:
    """Numbered shards DIR/PREFIX-00000.h5, ... of at most shard_tokens tokens (format 1, docs/DATA.md)."""

    def __init__(self, directory, prefix, args, meta, table):
        self.directory, self.prefix, self.limit = directory, prefix, args.shard_tokens
        self.meta, self.table = meta, table
        self.parts, self.fill, self.shards, self.total = [], 0, 0, 0

    def push(self, ids):
        import numpy as np
        ids = np.asarray(ids, dtype=np.int64)
        while len(ids):
            take = min(len(ids), self.limit - self.fill)
            self.parts.append(ids[:take])
            self.fill += take
            self.total += take
            ids = ids[take:]
            if self.fill == self.limit:
                self.flush()

    def flush(self):
        import h5py
        import numpy as np
        if not self.fill:
            return
        tokens = np.concatenate(self.parts)
        dtype = np.uint16 if self.meta["vocab_size"] <= 65536 else np.int32
        path = os.path.join(self.directory, f"{self.prefix}-{self.shards:05d}.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("tokens", data=tokens.astype(dtype))
            for key in ("vocab_size", "eot_id"):
                f.attrs[key] = np.int64(self.meta[key])
            f.attrs["tokenizer"] = np.bytes_(self.meta["tokenizer"].encode("ascii"))
            f.attrs["num_tokens"] = np.int64(len(tokens))
            f.attrs["format_version"] = np.int64(1)
            if self.table is not None:
                offsets, data = self.table
                f.create_dataset("decode_offsets", data=offsets)
                f.create_dataset("decode_bytes", data=data)
        self.parts, self.fill = [], 0
        self.shards += 1


class Progress:
    def __init__(self, total_bytes, enabled):
        self.total, self.enabled, self.start = total_bytes, enabled, time.time()
        self.last, self.printed = self.start, False

    def report(self, done_bytes, tokens, final=False):
        now = time.time()
        if not self.enabled or (not final and now - self.last < 1.0) or (final and not self.printed):
            return
        self.last, self.printed = now, True
        elapsed = now - self.start
        frac = done_bytes / self.total if self.total else 1.0
        eta = 0 if final or frac <= 0 else elapsed * (1 - frac) / frac
        bar = "#" * int(30 * frac) + "." * (30 - int(30 * frac))
        end = "\r" if sys.stderr.isatty() and not final else "\n"
        print(f"prepare_tokenized: [{bar}] {done_bytes / 1e6:.1f} / {self.total / 1e6:.1f} MB, "
              f"{tokens / max(elapsed, 1e-9) / 1e6:.2f} M tokens/s, ETA {eta:.0f} s", end=end, file=sys.stderr)
        sys.stderr.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="See docs/DATA.md (the shard format and the decode table).")
    parser.add_argument("--input", action="append", default=[],
                        help="a text file, a directory or a quoted glob (repeatable)")
    parser.add_argument("--output", help="the directory of shards (created; see --force)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--tokenizer", help="a Hugging Face tokenizer.json")
    source.add_argument("--train-bpe", type=int, metavar="N", help="train a byte-level BPE of N ids on the inputs")
    parser.add_argument("--eot", help="the end-of-text token (default: <|endoftext|>, </s>, ... whichever exists)")
    parser.add_argument("--name", help="the shards' tokenizer attribute (default: from the tokenizer's file name)")
    parser.add_argument("--shard-tokens", type=int, default=1 << 24, help="tokens per shard (default 16777216)")
    parser.add_argument("--val-fraction", type=float, default=0.05, help="share of tokens for val (default 0.05)")
    parser.add_argument("--force", action="store_true", help="replace the shards already in --output")
    parser.add_argument("--threads", type=int, help="encoding threads (default: every core)")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress line")
    parser.add_argument("--encode", metavar="TEXT", help="print TEXT's ids with --tokenizer, and nothing else")
    parser.add_argument("--list-inputs", action="store_true",
                        help="print the files the inputs give (one a line, in the order they would be read) and "
                             "what was skipped, and write nothing; needs no packages")
    args = parser.parse_args()
    if args.list_inputs:
        if not args.input:
            parser.error("--list-inputs needs --input")
        inputs = list_inputs(args.input)
        for path, _ in inputs.files:
            print(path)
        print(f"prepare_tokenized: {len(inputs.files)} files (skipped: {inputs.skipped_text()}), "
              f"{sum(size for _, size in inputs.files)} bytes", file=sys.stderr)
        return
    # The arguments are checked before the packages: their errors need none.
    if args.encode is not None:
        if not args.tokenizer:
            parser.error("--encode needs --tokenizer")
    else:
        if not args.input or not args.output:
            parser.error("--input and --output are required")
        if not args.tokenizer and not args.train_bpe:
            parser.error("give --tokenizer FILE or --train-bpe N")
        if args.train_bpe is not None and not 257 <= args.train_bpe <= (1 << 24):
            parser.error(f"--train-bpe {args.train_bpe}: a byte-level BPE needs at least 257 ids (256 bytes and "
                         f"end-of-text) and mtf reads decode tables of at most 16777216")
        if args.shard_tokens < 1:
            parser.error("--shard-tokens must be at least 1")
        if not 0 <= args.val_fraction < 1:
            parser.error(f"--val-fraction must be in [0, 1), not {args.val_fraction}")
    if args.threads:
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # read when tokenizers starts its pool
    import_packages()
    import numpy as np

    if args.encode is not None:
        tok = load_tokenizer(args.tokenizer)
        print(" ".join(map(str, tok.encode(args.encode, add_special_tokens=False).ids)))
        return

    inputs = list_inputs(args.input)
    files, bad_utf8 = inputs.files, [0]
    prepare_output(args.output, args.force)
    paths = [p for p, _ in files]
    t0 = time.time()
    if args.train_bpe:
        tok = train_bpe(args, paths, bad_utf8)
        bad_utf8[0] = 0  # counted again below
    else:
        tok = load_tokenizer(args.tokenizer)
    saved = os.path.join(args.output, "tokenizer.json")
    if args.train_bpe:
        tok.save(saved)
    elif os.path.abspath(args.tokenizer) != os.path.abspath(saved):
        shutil.copyfile(args.tokenizer, saved)
    eot = find_eot(tok, args.eot if args.tokenizer else EOT_TRAINED)
    real = tok.get_vocab_size(with_added_tokens=True)
    vocab_size = -(-real // VOCAB_PAD) * VOCAB_PAD
    if vocab_size > (1 << 24):
        fail(f"the tokenizer has {real} ids; mtf decode tables hold at most 16777216")
    name = tokenizer_name(args, tok)
    table = decode_table(tok, vocab_size)

    progress = Progress(sum(size for _, size in files), args.progress)
    sinks = {}
    meta = {"vocab_size": vocab_size, "eot_id": eot, "tokenizer": name}
    done_bytes = done_tokens = 0
    samples = []
    pending = []  # encoded documents, sunk only once the table is verified (sinks need it)

    def batches():
        batch, size = [], 0
        for path, nbytes in files:
            batch.append((path, nbytes))
            size += nbytes
            if size >= (8 << 20) or len(batch) >= 512:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    def sink_documents(encoded):
        nonlocal done_tokens
        for ids in encoded:
            n = len(ids) + 1
            to_val = sinks["val"].total + n <= args.val_fraction * (done_tokens + n)
            sinks["val" if to_val else "train"].push(list(ids) + [eot])
            done_tokens += n

    verdict = None
    for batch in batches():
        texts = [read_text(path, bad_utf8) for path, _ in batch]
        encoded = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        done_bytes += sum(nbytes for _, nbytes in batch)
        for ids in encoded:
            if ids and (max(ids) >= vocab_size or min(ids) < 0):
                fail("the tokenizer produced an id outside its vocabulary")
        if verdict is None:
            samples.extend(encoded[:200 - len(samples)])
            pending.extend(encoded)
            if len(samples) < 200 and done_bytes < progress.total:
                continue
            verdict = verify_table(tok, table, samples)
            table_arrays = None
            if verdict in ("exact", "leading-space"):
                offsets = np.zeros(vocab_size + 1, dtype=np.int64)
                offsets[1:] = np.cumsum([len(b) for b in table])
                table_arrays = (offsets, np.frombuffer(b"".join(table), dtype=np.uint8))
            else:
                print(f"prepare_tokenized: warning: tokenizer '{name}' cannot be decoded token by token "
                      f"({verdict}); the shards get no decode table, and mtf generate will print ids",
                      file=sys.stderr)
            for prefix in ("train", "val"):
                sinks[prefix] = Sink(args.output, prefix, args, meta, table_arrays)
            encoded, pending = pending, []
        sink_documents(encoded)
        progress.report(done_bytes, done_tokens)
    for sink in sinks.values():
        sink.flush()
    progress.report(done_bytes, done_tokens, final=True)

    table_bytes = sum(len(b) for b in table)
    print(f"prepare_tokenized: {len(files)} files (skipped: {inputs.skipped_text()}), {done_bytes} bytes; "
          f"train {sinks['train'].total} tokens in {sinks['train'].shards} shards, val {sinks['val'].total} tokens in "
          f"{sinks['val'].shards} shards, in {args.output}")
    print(f"prepare_tokenized: tokenizer '{name}': {real} ids (vocab_size {vocab_size}), eot_id {eot}; "
          + (f"decode table {vocab_size} ids, {table_bytes} bytes ({verdict} on {len(samples)} sample documents)"
             if sinks["train"].table is not None else "no decode table")
          + f"; saved as {saved}; {time.time() - t0:.1f} s")
    if bad_utf8[0]:
        print(f"prepare_tokenized: {bad_utf8[0]} files were not valid UTF-8: their invalid bytes became U+FFFD",
              file=sys.stderr)


if __name__ == "__main__":
    main()
