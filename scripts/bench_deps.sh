#!/bin/bash
# bench_deps.sh — create .venv-bench/ with the benchmark peers (a current PyTorch with
# torch.compile, SpikingJelly) from PyPI. Run by `make bench-deps`; never by `make test`.
#
# Lean by design: every package of bench/requirements.txt is pinned and installed with
# --no-deps, so the multi-GB set of CUDA wheels that PyPI's Linux torch depends on is not
# pulled. torch finds the CUDA libraries it links in the system toolkit (/usr/local/cuda);
# the few a toolkit lacks come from bench/requirements-cuda-libs.txt, and only if
# `import torch` fails without them. If it still fails, torch's full dependency set is
# installed (that is several GB). spikingjelly.datasets' imports (torchvision, torchaudio,
# matplotlib, scipy; bench/datasets_check.py) are pinned the same way. Idempotent: a venv that
# already imports both peers and spikingjelly.datasets at the pinned versions is left as it is.
# Refuses, before installing anything, when the disk has less free space than the install needs.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${BENCH_VENV:-.venv-bench}
REQ=bench/requirements.txt
CUDA_REQ=bench/requirements-cuda-libs.txt
NEED_LEAN_MB=4000     # measured 2.1 GiB installed + the wheel cache while installing
NEED_FULL_MB=9000

torch_pin=$(sed -n 's/^torch==//p' "$REQ")
sj_pin=$(sed -n 's/^spikingjelly==//p' "$REQ")
torch_probe="import torch, spikingjelly.activation_based.neuron as n; \
assert torch.__version__.split('+')[0] == '$torch_pin', torch.__version__; \
import importlib.metadata as m; assert m.version('spikingjelly') == '$sj_pin'"
probe="$torch_probe; import spikingjelly.datasets, safetensors, nir, nirtorch"   # + torchvision, ...

if [[ -x $VENV/bin/python ]] && $VENV/bin/python -c "$probe" 2>/dev/null; then
    echo "bench-deps: $VENV already has torch $torch_pin and spikingjelly $sj_pin ($(du -sh "$VENV" | cut -f1))"
    exit 0
fi

# A venv with the peers but not every pinned package (e.g. one made before a package was added):
# install what is missing into it (pinned, --no-deps), instead of building a new venv.
if [[ -x $VENV/bin/python ]] && $VENV/bin/python -c "$torch_probe" 2>/dev/null; then
    echo "bench-deps: $VENV has the peers; adding the pinned packages it lacks from $REQ"
    "$VENV/bin/python" -m pip --disable-pip-version-check install -q --no-deps -r "$REQ"
    if $VENV/bin/python -c "$probe" 2>/dev/null; then
        echo "bench-deps: $VENV ready ($(du -sh "$VENV" | cut -f1))"
        exit 0
    fi
fi

free_mb() { df -Pm "$1" | awk 'NR==2 {print $4}'; }
check_space() {  # check_space NEED_MB WHAT
    local have; have=$(free_mb .)
    if (( have < $1 )); then
        echo "bench-deps: only ${have} MB free on $(df -P . | awk 'NR==2 {print $6}'); $2 needs about $1 MB." >&2
        echo "bench-deps: free some space (or set BENCH_VENV to a path on a larger disk) and run make bench-deps again." >&2
        exit 1
    fi
}
check_space $NEED_LEAN_MB "the benchmark venv"

# SpikingJelly 2.0 needs Python >= 3.11
PYTHON=""
for cand in ${BENCH_PYTHON:-} python3.12 python3.11 python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
       "$cand" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        PYTHON=$cand; break
    fi
done
if [[ -z $PYTHON ]]; then
    echo "bench-deps: no Python >= 3.11 with the venv module found (set BENCH_PYTHON=/path/to/python3.11)" >&2
    exit 1
fi

echo "bench-deps: creating $VENV with $PYTHON ($($PYTHON --version 2>&1))"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
echo "bench-deps: installing $REQ (--no-deps: torch $torch_pin without PyPI's CUDA wheels)"
"${PIP[@]}" install --no-deps -r "$REQ"

if ! err=$("$VENV/bin/python" -c "$torch_probe" 2>&1); then
    echo "bench-deps: import torch failed without extra CUDA libraries: $(echo "$err" | tail -1)"
    echo "bench-deps: adding $CUDA_REQ"
    "${PIP[@]}" install --no-deps -r "$CUDA_REQ"
fi
if ! err=$("$VENV/bin/python" -c "$torch_probe" 2>&1); then
    echo "bench-deps: still failing: $(echo "$err" | tail -1)"
    check_space $NEED_FULL_MB "torch's full CUDA dependency set"
    echo "bench-deps: installing torch==$torch_pin with its full dependency set (several GB)"
    "${PIP[@]}" install "torch==$torch_pin"
fi
# torchaudio (imported by spikingjelly.datasets for its SpeechCommands only) refuses to import
# when its CUDA build differs from torch's (PyPI's newest, 2.11.0, is CUDA 13.0; torch 2.15.0 is
# 13.2). Rename its extension aside: torchaudio then imports as pure Python.
if err=$("$VENV/bin/python" -c "import torchaudio" 2>&1); [[ $err == *"different CUDA versions"* ]]; then
    ta_lib=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torchaudio/lib
    echo "bench-deps: torchaudio: $(echo "$err" | tail -1)"
    echo "bench-deps: disabling $ta_lib/_torchaudio*.so (SpikingJelly's datasets never call it)"
    for so in "$ta_lib"/_torchaudio*.so; do mv "$so" "$so.disabled"; done
fi
if ! err=$("$VENV/bin/python" -c "$probe" 2>&1); then
    echo "bench-deps: the venv does not import torch, spikingjelly and spikingjelly.datasets:" >&2
    echo "$err" >&2
    exit 1
fi
echo "bench-deps: $VENV ready: $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'), spikingjelly $sj_pin, $(du -sh "$VENV" | cut -f1)"
