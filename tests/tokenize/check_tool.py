"""Checks of tools/prepare_tokenized.py that need none of its packages (tests/tokenize/CMakeLists.txt): run with
any python3 as `python3 -I -S check_tool.py ...` (standard library only), never skipped.

  no-venv SCRIPT WORK            a copy of SCRIPT in a tree without .venv, run by a Python that lacks tokenizers,
                                 says what to run (bash tools/install-deps.sh --python, then the command again)
                                 and exits with status 1, no traceback
  reexec-args SCRIPT WORK        with a .venv/bin/python (a stand-in that prints its arguments), SCRIPT runs
                                 itself again with it: the same arguments, MTF_PREPARE_REEXEC=1 set
  reexec-venv SCRIPT WORK        with a real .venv (python -m venv: its bin/python is a link to this very
                                 interpreter) that lacks the packages, SCRIPT still runs itself again with it,
                                 and the second run says that .venv lacks them (no loop)
  inputs MTF SCRIPT WORK         `SCRIPT --list-inputs` and `mtf data prepare` on the same trees of files,
                                 links, cycles, globs: the same files in the same order (the byte-tokenizer
                                 shard's documents = the listed files' bytes), the same skip counts and bytes,
                                 the same broken links on stderr, the same errors and exit statuses
  prepare PYTHON SCRIPT WORK     (PYTHON has tokenizers, h5py, numpy: with_python.sh) a real run on the tree of
                                 links: its summary counts what --list-inputs counts, and its shard holds the
                                 tokens of a run on the listed files, each named with --input, in that order
"""
import os
import re
import shutil
import subprocess
import sys


def fail(message):
    sys.exit(f"check_tool: FAIL: {message}")


def run(cmd, cwd=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MTF_VENV", "MTF_PREPARE_REEXEC", "PYTHONPATH")}
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True)
    return proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def show(cmd, rc, out, err):
    return f"$ {' '.join(map(str, cmd))}\nexit {rc}\n--- stdout\n{out}--- stderr\n{err}"


def plain_python():
    """This interpreter without site-packages: it must lack tokenizers (and h5py, numpy)."""
    cmd = [sys.executable, "-I", "-S"]
    rc, _, _ = run(cmd + ["-c", "import tokenizers"])
    if rc == 0:
        fail(f"'{sys.executable} -I -S' imports tokenizers, so it cannot stand for a Python that lacks it")
    return cmd


def tree(work, script, name):
    """WORK/NAME/tools/prepare_tokenized.py, a copy of SCRIPT (its ROOT is WORK/NAME); returns (root, copy)."""
    root = os.path.join(os.path.abspath(work), name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "tools"))
    copy = os.path.join(root, "tools", "prepare_tokenized.py")
    shutil.copyfile(script, copy)
    return root, copy


def no_venv(script, work):
    root, copy = tree(work, script, "no-venv")
    python = plain_python()
    args = ["--input", "corpus", "--output", "data", "--train-bpe", "300"]
    elsewhere = os.path.join(os.path.abspath(work), "elsewhere")
    os.makedirs(elsewhere, exist_ok=True)
    # from ROOT (the paths as the README writes them) and from elsewhere (absolute paths)
    for cwd, shown in ((root, ""), (elsewhere, root + "/")):
        cmd = python + [copy] + args
        rc, out, err = run(cmd, cwd=cwd)
        print(show(cmd, rc, out, err))
        if rc != 1:
            fail(f"exit status {rc}, wanted 1")
        if "Traceback" in err:
            fail("a traceback instead of an error message")
        expected = [
            "prepare_tokenized: error: prepare_tokenized.py needs the Python packages tokenizers, h5py and numpy; ",
            f"lacks tokenizers, h5py and numpy and there is no {shown}.venv/bin/python to run it with: ",
            f"run `bash {shown}tools/install-deps.sh --python` (it makes {shown}.venv with them), "
            f"then run this command again",
        ]
        for text in expected:
            if text not in err:
                fail(f"the message lacks: {text}")
    print("check_tool: without .venv the script says what to run and exits 1")


def reexec_args(script, work):
    root, copy = tree(work, script, "reexec-args")
    fake = os.path.join(root, ".venv", "bin", "python")
    os.makedirs(os.path.dirname(fake))
    with open(fake, "w") as f:
        f.write('#!/bin/sh\necho "fake venv python: MTF_PREPARE_REEXEC=$MTF_PREPARE_REEXEC"\n'
                'for a in "$@"; do echo "[$a]"; done\nexit 0\n')
    os.chmod(fake, 0o755)
    args = ["--input", "a file with spaces.txt", "--input", "corpus/*.txt", "--output", "out", "--train-bpe", "300",
            "--name", ""]
    cmd = plain_python() + [copy] + args
    rc, out, err = run(cmd, cwd=os.path.abspath(work))
    print(show(cmd, rc, out, err))
    want = "".join(f"{line}\n" for line in ["fake venv python: MTF_PREPARE_REEXEC=1", f"[{copy}]"]
                   + [f"[{a}]" for a in args])
    if rc != 0 or out != want:
        fail(f"the script did not run itself again with .venv/bin/python and the same arguments; wanted exit 0 "
             f"and stdout\n{want}")
    print("check_tool: with .venv the script runs itself again with .venv/bin/python, the same arguments")


def reexec_venv(script, work):
    root, copy = tree(work, script, "reexec-venv")
    venv = os.path.join(root, ".venv")
    cmd = [sys.executable, "-I", "-m", "venv", "--without-pip", "--symlinks", venv]
    rc, out, err = run(cmd)
    if rc != 0:
        fail(f"could not make a venv to test with\n{show(cmd, rc, out, err)}")
    print(f"check_tool: {venv}/bin/python -> {os.path.realpath(os.path.join(venv, 'bin', 'python'))}")
    cmd = plain_python() + [copy, "--input", "corpus", "--output", "data", "--train-bpe", "300"]
    rc, out, err = run(cmd, cwd=root)
    print(show(cmd, rc, out, err))
    if rc != 1 or "Traceback" in err:
        fail(f"exit status {rc} (wanted 1, an error message and no traceback)")
    said = re.search(r"needs the Python packages tokenizers, h5py and numpy; the Python of \.venv \((.*)\) lacks "
                     r"tokenizers, h5py and numpy: run `bash tools/install-deps.sh --python` \(it installs them into "
                     r"\.venv\), then run this command again", err)
    if not said:
        fail("the script did not run itself again with .venv/bin/python (a link to the interpreter that started "
             "it), or did not say that .venv lacks the packages")
    if os.path.realpath(said.group(1)) != os.path.realpath(os.path.join(venv, "bin", "python")) or \
            not said.group(1).startswith(venv):
        fail(f"the second run's interpreter is {said.group(1)}, not {venv}/bin/python")
    print("check_tool: a real .venv (bin/python a link to the same interpreter) is run, once")


# ---- inputs: the same walk as mtf data prepare ----

def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make_trees(base):
    """base/real: text files (odd names, hidden ones), a binary file, a FIFO, a hard link; base/links: links
    to all of these, a link to a link, a broken link, a link to itself, two cycles."""
    shutil.rmtree(base, ignore_errors=True)
    real, links = os.path.join(base, "real"), os.path.join(base, "links")
    files = {
        "a.txt": b"alpha: the first document\n",
        "b.txt": b"bravo: the second one, a little longer\n",
        "Z upper.txt": b"zulu sorts before a (bytes)\n",
        "_under.txt": b"underscore sorts after Z, before a\n",
        "\u00e9t\u00e9.txt": "summer: a name that is not ASCII\n".encode(),
        "lit[1].txt": b"a name with glob characters, given literally\n",
        "bad-utf8.txt": b"not \xff valid UTF-8 (still text: no NUL)\n",
        ".hidden.txt": b"hidden: read only through a glob with the dot\n",
        ".hiddendir/h.txt": b"in a hidden directory\n",
        "sub/c.txt": b"charlie, in a subdirectory\n",
        "sub/d.txt": b"delta\n",
        "sub/deeper/e.txt": b"echo, two levels down\n",
        "empty.txt": b"",
        "skip.bin": b"bin\0ary\n",
    }
    for name, data in files.items():
        write(os.path.join(real, name), data)
    os.link(os.path.join(real, "a.txt"), os.path.join(real, "sub", "hard-a.txt"))  # the same inode as a.txt
    os.mkfifo(os.path.join(real, "fifo"))
    os.makedirs(os.path.join(links, "deep"))
    for link, target in [("a.txt", "../real/a.txt"), ("a.u8", "a.txt"), ("b.txt", "../real/b.txt"),
                         ("bin", "../real/skip.bin"), ("broken", "../real/missing"), ("self", "self"),
                         ("deep/back", ".."), ("loop", "."), ("sub", "../real/sub"), ("real", "../real"),
                         ("fifo", "../real/fifo"), (".hidden-link", "../real/b.txt")]:
        os.symlink(target, os.path.join(links, link))
    return real, links


def shard_tokens(directory):
    """The tokens of DIRECTORY's only shard, train-00000.h5 (val fraction 0), as h5dump prints them."""
    shards = sorted(n for n in os.listdir(directory) if n.endswith(".h5"))
    if shards != ["train-00000.h5"]:
        fail(f"wanted one shard, train-00000.h5, in {directory}: {shards}")
    rc, out, err = run(["h5dump", "-d", "tokens", "-y", "-w", "0", os.path.join(directory, shards[0])])
    if rc != 0:
        fail(f"h5dump: {err}")
    body = out[out.index("DATA {") + len("DATA {"):]
    return [int(t) for t in re.findall(r"\d+", body[:body.index("}")])]


def shard_documents(directory):
    """The documents of a byte-tokenizer run (val fraction 0: all in train-00000.h5), as bytes."""
    documents, current = [], bytearray()
    for t in shard_tokens(directory):
        if t == 256:
            documents.append(bytes(current))
            current = bytearray()
        else:
            current.append(t)
    if current:
        fail(f"{directory}: tokens after the last end-of-text")
    return documents


def inputs(mtf, script, work):
    base = os.path.join(os.path.abspath(work), "inputs")
    real, links = make_trees(base)
    many = [os.path.join(base, "many", f"f{i:03d}.txt") for i in range(300)]
    for i, path in enumerate(many):
        write(path, f"document {i}\n".encode())
    cases = [
        [real],
        [links],
        [f"{real}/"],
        [f"{real}/*"],
        [f"{real}/*.txt", real],
        [f"{real}/.*"],
        [f"{links}/*"],
        [f"{links}/a.u8", f"{real}/a.txt", f"{links}/a.txt", f"{real}/sub/hard-a.txt"],
        [f"{real}/lit[1].txt"],  # exists: taken literally
        [f"{real}/lit\\[1\\].tx?", f"{real}/[^a_Z]*.txt", f"{real}/[!b]*", f"{real}/[]a]*", f"{real}/\\a.txt*",
         f"{real}/\\.hidden*"],  # glob(3)'s escapes, [^...], a ] first in a class, a dot matched by an escape
        [f"{real}/skip.bin", f"{links}/bin"],
        [f"{links}/real/sub", f"{links}", f"{real}"],
        [f"{real}/s*/*", f"{real}/sub"],
        [f"{real}/.hiddendir", f"{real}/.hidden.txt"],
        many[::-1],
    ]
    errors = [[f"{base}/nowhere/*"], [f"{links}/broken"], [f"{links}/self"], [f"{base}/nonexistent"], [f"{real}/fifo"],
              [f"{real}/skip.bin", f"{base}/nonexistent"], [f"{real}/*.bin"],
              [f"{real}/lit[1].tx?"], [f"{real}/a[.txt"], [f"{real}/[.]hidden*"]]
    python = plain_python()
    prefix = re.compile(r"^(mtf data prepare|prepare_tokenized): ", re.M)
    for k, given in enumerate(cases + errors):
        flags = [a for path in given for a in ("--input", path)]
        out_dir = os.path.join(base, f"out-{k}")
        mtf_cmd = [mtf, "data", "prepare"] + flags + ["--output", out_dir, "--force", "--val-fraction", "0"]
        tool_cmd = python + [script, "--list-inputs"] + flags
        m_rc, m_out, m_err = run(mtf_cmd)
        t_rc, t_out, t_err = run(tool_cmd)
        logs = show(mtf_cmd, m_rc, m_out, m_err) + show(tool_cmd, t_rc, t_out, t_err)
        if k >= len(cases):  # an error: the same status and message
            m_msg = prefix.sub("", m_err.strip())
            t_msg = prefix.sub("", t_err.strip())
            if m_rc != 1 or t_rc != 1 or m_msg != t_msg or "Traceback" in t_err:
                fail(f"case {k}: wanted exit 1 and the same error from both\n{logs}")
            print(f"check_tool: error case {k}: both exit 1: {t_msg}")
            continue
        if m_rc != 0 or t_rc != 0:
            fail(f"case {k}: a run failed\n{logs}")
        summary = re.search(r"^prepare: (\d+ files \(skipped: [^)]*\), \d+ bytes)", m_out, re.M)
        t_summary = re.search(r"^prepare_tokenized: (\d+ files \(skipped: [^)]*\), \d+ bytes)$", t_err, re.M)
        if not summary or not t_summary or summary.group(1) != t_summary.group(1):
            fail(f"case {k}: the summaries differ\n{logs}")
        m_broken = sorted(prefix.sub("", line) for line in m_err.splitlines() if "skipped the broken link" in line)
        t_broken = sorted(prefix.sub("", line) for line in t_err.splitlines() if "skipped the broken link" in line)
        if m_broken != t_broken:
            fail(f"case {k}: the broken links named differ\n{logs}")
        listed = t_out.splitlines()
        wanted = []
        for path in listed:
            with open(path, "rb") as f:
                wanted.append(f.read())
        if shard_documents(out_dir) != wanted:
            fail(f"case {k}: mtf's documents are not the listed files, in that order\n{logs}")
        print(f"check_tool: case {k} ({' '.join(os.path.relpath(g, base) for g in given[:4])}"
              f"{' ...' if len(given) > 4 else ''}): {len(listed)} files in the same order, {t_summary.group(1)}")
    print(f"check_tool: --list-inputs and mtf data prepare agree on {len(cases)} input sets and {len(errors)} errors")


def prepare(python, script, work):
    base = os.path.join(os.path.abspath(work), "prepare")
    _, links = make_trees(base)
    cmd = plain_python() + [script, "--list-inputs", "--input", links]
    rc, out, err = run(cmd)
    print(show(cmd, rc, out, err))
    listed, counted = out.splitlines(), re.search(r"^prepare_tokenized: (\d+ files \(skipped: .*\), \d+ bytes)$",
                                                        err, re.M)
    if rc != 0 or not listed or not counted:
        fail("--list-inputs failed")
    common = ["--val-fraction", "0", "--no-progress", "--force"]
    cmd = [python, script, "--input", links, "--output", f"{base}/out-links", "--train-bpe", "300"] + common
    rc, out, err = run(cmd)
    print(show(cmd, rc, out, err))
    if rc != 0 or not re.search(f"^prepare_tokenized: {re.escape(counted.group(1))}; train ", out, re.M):
        fail(f"the run did not succeed, or its summary does not begin with --list-inputs' '{counted.group(1)}'")
    if err.count("prepare_tokenized: skipped the broken link") != 2:
        fail("the run did not name the two broken links on stderr")
    cmd = [python, script] + [a for path in listed for a in ("--input", path)] + [
        "--output", f"{base}/out-listed", "--tokenizer", f"{base}/out-links/tokenizer.json"] + common
    rc, out, err = run(cmd)
    print(show(cmd, rc, out, err))
    if rc != 0:
        fail("the run on the listed files failed")
    if shard_tokens(f"{base}/out-links") != shard_tokens(f"{base}/out-listed"):
        fail("the run on the directory of links did not read the listed files in the listed order")
    print(f"check_tool: a real run reads what --list-inputs lists ({counted.group(1)}), in that order")


def main():
    if len(sys.argv) < 2:
        fail(f"usage: {sys.argv[0]} no-venv|reexec-args|reexec-venv SCRIPT WORK | inputs MTF SCRIPT WORK | "
             f"prepare PYTHON SCRIPT WORK")
    mode, rest = sys.argv[1], sys.argv[2:]
    modes = {"no-venv": (no_venv, 2), "reexec-args": (reexec_args, 2), "reexec-venv": (reexec_venv, 2),
             "inputs": (inputs, 3), "prepare": (prepare, 3)}
    if mode not in modes or len(rest) != modes[mode][1]:
        fail(f"bad arguments: {sys.argv[1:]}")
    os.makedirs(rest[-1], exist_ok=True)
    modes[mode][0](*rest)


if __name__ == "__main__":
    main()
