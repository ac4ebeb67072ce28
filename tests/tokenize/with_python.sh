#!/usr/bin/env bash
# with_python.sh PYTHON SCRIPT ARGS...: runs SCRIPT with PYTHON when it has h5py, numpy and tokenizers;
# otherwise exits 77 (CTest: skipped) saying how to get them. with_python.sh PYTHON -- COMMAND ARGS...
# runs COMMAND as it is (e.g. expect.sh around PYTHON) after the same check.
python=$1; shift
if ! "$python" -c 'import h5py, numpy, tokenizers' 2>/dev/null; then
  echo "skipped: '$python' lacks h5py, numpy or tokenizers: run 'bash tools/install-deps.sh --python' (PyPI)"
  exit 77
fi
if [ "${1:-}" = "--" ]; then shift; exec "$@"; fi
exec "$python" "$@"
