#!/usr/bin/env python3
"""interop_check.py — spikemesh's checkpoint import/export against SpikingJelly 2.0 and NIR, in fp64.

Round trips on small generated datasets (each model in its own temporary directory):
  1. SpikingJelly -> spikemesh (cifar10dvs_vgg, spikformer_ti, fmnist_csnn_avgpool): a SpikingJelly
     model (bench/sj_models.py) in float64, seeded random weights, every batch norm given non-trivial
     running statistics (measured on a calibration batch, then perturbed) and weight/bias, so that its
     neurons fire; `safetensors.torch.save_file(model.state_dict())` -> `spikemesh ckpt import
     --precision fp64` -> `spikemesh eval --save-outputs`; /outputs against the model's eval-mode
     outputs averaged over T (logits; the CSNN: the firing rates of its last IF layer).
  2. spikemesh -> SpikingJelly (cifar10dvs_vgg, fmnist_csnn_avgpool): `spikemesh train` 2 steps from
     the imported checkpoint -> `ckpt export --out x.safetensors` -> `load_state_dict(strict=True)`
     into the twin: every tensor bitwise equal to the export; the twin's eval-mode outputs against
     `spikemesh eval --save-outputs` of that checkpoint. spikformer_ti: the step-0 checkpoint of 1.
     exported and loaded into a fresh Spikformer, bitwise equal to the state dict 1. saved.
  3. NIR (fmnist_csnn_avgpool, cifar10dvs_vgg): `ckpt export --out x.nir` of the trained checkpoints
     -> `nir.read` (type check on) -> SpikingJelly's `import_from_nir(dtype=float64, step_mode="m")`
     -> outputs averaged over T against the same /outputs; flipped spikes (output, and every hidden
     layer against the twin of 2.) reported. An fmnist_csnn (max pooling) checkpoint must be refused:
     exit 1, one `spikemesh: error:` line naming conv_fc.3 and suggesting avgpool2d.
Tolerances: logits 1e-9 absolute (both sides compute in fp64, only the summation order of the
convolutions and matrix products differs, ~1e-15 relative); spike rates exactly (a flipped spike
would change a rate by 1/T: reported, never absorbed). NIR folds batch norm into the convolution,
which changes the membranes' last bits (~1e-16 relative): a spike can flip only where a membrane lies
that close to the threshold; the same tolerances apply, and flips are counted per layer.
PyTorch side: inputs T-major [T, N, ...] (static images repeated over T, as spikemesh's direct
encoding), float64, neurons reset before each forward; the NIR module returns (output, state) and
starts from rest with state=None.
One line per check, then a table and a summary. Exit status 1 on any mismatch or error.

  .venv-bench/bin/python bench/interop_check.py [--bin build/bin/spikemesh] [--models a,b] [--keep DIR]
"""
import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import h5py
import numpy as np

logging.getLogger("torch._library.triton").setLevel(logging.ERROR)  # "Triton not available" on CPU

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

MODELS = ("cifar10dvs_vgg", "spikformer_ti", "fmnist_csnn_avgpool")
# Logits: spikemesh and PyTorch both compute in fp64; convolutions and matrix products sum in a
# different order (oneDNN / BLAS blocking), which changes the last bits (~1e-15 relative) of
# membrane potentials and logits. 1e-9 absolute is far above that and far below a real error.
TOL_LOGITS = 1e-9
TOL_RATES = 0.0  # spike rates are counts / T: equal or a spike flipped
THREADS = 2


class Result:
    def __init__(self):
        self.fails, self.n, self.rows = [], 0, []

    def line(self, ok, what, detail=""):
        self.n += 1
        print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
        if not ok:
            self.fails.append(what)

    def row(self, model, direction, diff, tol, ok, note=""):
        """One table row (diff None: no number, e.g. an error check)."""
        self.rows.append((model, direction, "-" if diff is None else f"{diff:.3g}",
                          "-" if tol is None else ("exact" if tol == 0 else f"{tol:g}"),
                          ("ok" if ok else "FAIL") + (f" ({note})" if note else "")))

    def table(self):
        head = ("model", "direction", "largest difference", "tolerance", "result")
        w = [max(len(r[i]) for r in [head] + self.rows) for i in range(5)]
        fmt = lambda r: " | ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
        print(fmt(head))
        print("-|-".join("-" * x for x in w))
        for r in self.rows:
            print(fmt(r))


# ------------------------------------------------------------------------------ spikemesh
def sm(binary, *args, expect_fail=False):
    """Runs `spikemesh ARGS`; returns (rc, stdout, stderr); raises on an unexpected exit status."""
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    cmd = [binary, *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if (p.returncode != 0) != expect_fail:
        tail = (p.stdout + p.stderr).strip().splitlines()[-4:]
        raise RuntimeError(f"exit {p.returncode}: {' | '.join(tail)}  [{' '.join(cmd)}]")
    return p.returncode, p.stdout, p.stderr


def sm_eval(binary, ckpt, data, out, n):
    sm(binary, "eval", ckpt, "--data", data, "--save-outputs", "--out", out, "--device", "cpu",
       "--threads", THREADS, "--eval-batch-size", n)
    with h5py.File(out, "r") as f, h5py.File(data, "r") as d:
        outputs, labels, y = f["outputs"][...], f["labels"][...], d["test/y"][...]
    if not np.array_equal(labels, y):  # /outputs must be in dataset order
        raise RuntimeError(f"{out}: /labels {labels.tolist()} are not the dataset's test/y {y.tolist()}")
    return outputs, labels


# ------------------------------------------------------------------------------ datasets
def write_dataset(path, kind, shape, T, n_train, n_test, seed, classes=10):
    """kind 'static': f32 images in [0, 1), x_scale 1 (the f32 values spikemesh reads are exactly
    the PyTorch input, as float64); 'events': u8 event counts [N, T, 2, S, S] (sparse, 0..4)."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs["num_classes"] = classes
        f.attrs["layout"] = "NCHW" if kind == "static" else "NTCHW"
        f.attrs["T"] = 0 if kind == "static" else T
        f.attrs["x_scale"] = 1.0
        for split, n in (("train", n_train), ("test", n_test)):
            if kind == "static":
                x = rng.random((n,) + shape).astype(np.float32)
            else:
                x = np.minimum(rng.poisson(0.4, (n, T) + shape), 4).astype(np.uint8)
            f[split + "/x"] = x
            f[split + "/y"] = rng.integers(0, classes, n).astype(np.int64)


def torch_input(data, split, T, n=None):
    """The split's x as spikemesh's encoder gives it, float64 [T, N, ...] (static images repeated)."""
    import torch
    with h5py.File(data, "r") as f:
        x = f[split + "/x"][: n]
        scale = float(f.attrs["x_scale"])
        static = f.attrs["layout"] == "NCHW"
    x = torch.from_numpy(x.astype(np.float64) * scale)
    return x.unsqueeze(0).repeat(T, *([1] * x.dim())) if static else x.transpose(0, 1).contiguous()


# ------------------------------------------------------------------------------ SpikingJelly side
def build_twin(model, T, C):
    import torch
    import sj_models
    if model == "cifar10dvs_vgg":
        m = sj_models.CIFAR10DVSVGG(dropout=0.25)
    elif model == "spikformer_ti":
        m = sj_models.build_spikformer(model, T)[0]
    elif model == "fmnist_csnn_avgpool":
        m = sj_models.CSNN(C, pool="avg")
    elif model == "fmnist_csnn":
        m = sj_models.CSNN(C, pool="max")
    else:
        raise ValueError(model)
    return m.to(torch.float64).eval()


def sj_run(m, x, hook=False):
    """Eval-mode forward from reset neurons: (output [T, N, K], spikes of every neuron layer in call
    order if hook). An NIR graph module returns (output, state); state=None starts from rest."""
    import torch
    from spikingjelly.activation_based import functional, neuron
    spikes, handles = [], []
    if hook:
        for mod in m.modules():
            if isinstance(mod, neuron.BaseNode) or type(mod).__name__ == "_NIRStatefulModule":
                handles.append(mod.register_forward_hook(
                    lambda _m, _i, o: spikes.append((o[0] if isinstance(o, tuple) else o).detach().clone())))
    m.eval()
    functional.reset_net(m)
    try:
        with torch.no_grad():
            out = m(x)
    finally:
        for h in handles:
            h.remove()
        functional.reset_net(m)
    out = out[0] if isinstance(out, tuple) else out
    return out, spikes


def sj_randomize(m, x_calib, seed, bn_gain=1.0, bn_shift=0.0, linear_gain=1.0):
    """Seeded weights plus non-trivial batch norms: running statistics measured on x_calib in train
    mode (so the normalised pre-activations have a realistic scale), then each perturbed at random
    (mean += 0.2 sd N(0,1), var *= exp(0.3 N(0,1)) > 0); weight gain*U(0.7, 1.3), bias shift +
    0.3 N(0,1). linear_gain scales the weights of the Linear layers (the CSNN's have no BN after them)."""
    import torch
    import torch.nn as nn
    from spikingjelly.activation_based import functional
    g = torch.Generator().manual_seed(seed)
    bns = [mod for mod in m.modules() if isinstance(mod, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.Linear) and linear_gain != 1.0:
                mod.weight.mul_(linear_gain)
        for mod in bns:
            mod.reset_running_stats()
            mod.momentum = None  # cumulative average: one batch -> its statistics
        m.train()
        functional.reset_net(m)
        m(x_calib)
        functional.reset_net(m)
        for mod in bns:
            mod.momentum = 0.1
            c = mod.num_features
            sd = mod.running_var.sqrt()
            mod.running_mean.add_(0.2 * sd * torch.randn(c, generator=g, dtype=torch.float64))
            mod.running_var.mul_(torch.exp(0.3 * torch.randn(c, generator=g, dtype=torch.float64)))
            mod.weight.copy_(bn_gain * (0.7 + 0.6 * torch.rand(c, generator=g, dtype=torch.float64)))
            mod.bias.copy_(bn_shift + 0.3 * torch.randn(c, generator=g, dtype=torch.float64))
    m.eval()
    assert all((b.running_var > 0).all() for b in bns)
    return m


def hidden_rates(m, x):
    _, spikes = sj_run(m, x, hook=True)
    return [float(s.mean()) for s in spikes]


# ------------------------------------------------------------------------------ comparisons
def fires(res, model, what, rates):
    """Every neuron layer must fire on the test inputs, else the output comparisons say little (a
    silent network gives the classifier's bias, or zero rates, on both sides)."""
    ok = bool(rates) and min(rates) > 0
    res.line(ok, f"{model} {what} fires", f"firing rate per neuron layer {' '.join(f'{r:.3f}' for r in rates)}"
             + ("" if ok else " -- a silent layer: the outputs would not test the weights behind it"))
    if not ok:
        res.row(model, what + " fires", None, None, False, "silent layer")


def compare_outputs(res, model, direction, got, want, rates, T):
    """got: spikemesh /outputs [N, K]; want: [N, K] from PyTorch. Rates: exact, flips counted."""
    if got.shape != want.shape:
        res.line(False, f"{model} {direction}", f"shape {got.shape}, want {want.shape}")
        res.row(model, direction, None, TOL_RATES if rates else TOL_LOGITS, False, "shape")
        return
    d = np.abs(got - want)
    dmax = float(d.max(initial=0))
    if not np.any(want) and not np.any(got):
        res.line(False, f"{model} {direction}", "every output is 0 on both sides: the check says nothing")
        res.row(model, direction, dmax, TOL_RATES if rates else TOL_LOGITS, False, "all-zero outputs")
        return
    if rates:
        flips = int(np.rint(d * T).sum())  # each flipped output spike moves a rate by 1/T
        ok = dmax <= TOL_RATES
        note = f"{flips} output spikes flipped" if flips else ""
        detail = (f"{got.shape[0]}x{got.shape[1]} firing rates, max |diff| {dmax:.3g}, output spikes "
                  f"{int(np.rint(want * T).sum())} of {want.size * T} fired, {flips} flipped (counted from the "
                  "rates: a lower bound)")
    else:
        ok = dmax <= TOL_LOGITS
        note = ""
        detail = (f"{got.shape[0]}x{got.shape[1]} logits (|max| {np.abs(want).max():.3g}), max |diff| {dmax:.3g}"
                  f" (tolerance {TOL_LOGITS:g}), argmax equal for {int((got.argmax(1) == want.argmax(1)).sum())}"
                  f" of {len(want)}")
    res.line(ok, f"{model} {direction}", detail)
    res.row(model, direction, dmax, TOL_RATES if rates else TOL_LOGITS, ok, note)


def compare_state(res, model, what, got, want):
    """Bitwise equality of two state dicts (names, dtypes, shapes, bytes)."""
    bad = [k for k in want if k not in got] + [k for k in got if k not in want]
    nbytes = 0
    for k in want:
        if k not in got:
            continue
        a, b = got[k].detach().contiguous(), want[k].detach().contiguous()
        same = a.dtype == b.dtype and a.shape == b.shape and a.numpy().tobytes() == b.numpy().tobytes()
        if not same:
            d = (a.double() - b.double()).abs().max().item() if a.shape == b.shape else float("nan")
            bad.append(f"{k} ({a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}, max |diff| {d:.3g})")
        nbytes += a.numel() * a.element_size()
    ok = not bad
    res.line(ok, f"{model} {what}", f"{len(want)} tensors ({nbytes / 1e6:.1f} MB) bitwise equal" if ok else
             f"{len(bad)} differ: {', '.join(bad[:4])}")
    res.row(model, what, None if not ok else 0.0, 0, ok, "" if ok else f"{len(bad)} tensors differ")


def compare_hidden(spk_a, spk_b):
    """Flipped spikes per neuron layer (NIR module vs twin): 'k of n' strings, total flips."""
    out, total = [], 0
    for a, b in zip(spk_a, spk_b):
        if a.shape != b.shape:
            out.append(f"shape {tuple(a.shape)} vs {tuple(b.shape)}")
            total += 1
            continue
        k = int((a != b).sum())
        total += k
        out.append(str(k))
    return out, total


# ------------------------------------------------------------------------------ the round trips
CONF = {  # T, test samples, train samples, input kind and shape, import/train flags, SJ init knobs
    "cifar10dvs_vgg": dict(T=4, n_test=3, n_train=8, kind="events", shape=(2, 48, 48), var=[],
                           init=dict(bn_gain=1.0, bn_shift=0.1), rates=False),
    "spikformer_ti": dict(T=2, n_test=2, n_train=2, kind="static", shape=(3, 224, 224), var=[], classes=1000,
                          init=dict(bn_gain=1.0, bn_shift=0.1), rates=False),
    "fmnist_csnn_avgpool": dict(T=4, n_test=16, n_train=8, kind="static", shape=(1, 28, 28), var=["--var", "C=8"],
                                init=dict(bn_gain=1.5, bn_shift=0.5, linear_gain=3.0), rates=True, C=8),
}


def round_trip(res, model, binary, work, seed):
    import torch
    import nir
    from safetensors.torch import load_file, save_file
    cf = CONF[model]
    T, N = cf["T"], cf["n_test"]
    data = os.path.join(work, "data.h5")
    write_dataset(data, cf["kind"], cf["shape"], T, cf["n_train"], N, seed, cf.get("classes", 10))
    x_test = torch_input(data, "test", T)
    x_calib = torch_input(data, "train", T, 4)
    Tflag = ["--T", T]

    # ---- 1. SpikingJelly -> spikemesh
    t0 = time.time()
    torch.manual_seed(seed)
    twin = sj_randomize(build_twin(model, T, cf.get("C")), x_calib, seed, **cf["init"])
    fires(res, model, "seeded SpikingJelly twin", hidden_rates(twin, x_test))
    want = sj_run(twin, x_test)[0].mean(0).numpy()
    saved = {k: v.detach().clone().contiguous() for k, v in twin.state_dict().items()}
    st = os.path.join(work, "sj.safetensors")
    save_file(saved, st)
    init = os.path.join(work, "init.h5")
    sm(binary, "ckpt", "import", st, "--model", model, *cf["var"], *Tflag, "--precision", "fp64", "--out", init)
    got, _ = sm_eval(binary, init, data, os.path.join(work, "eval_init.h5"), N)
    compare_outputs(res, model, "SJ -> spikemesh", got, want, cf["rates"], T)
    print(f"     ({time.time() - t0:.1f} s)", flush=True)

    # ---- 2. spikemesh -> SpikingJelly
    t0 = time.time()
    if model == "spikformer_ti":  # the step-0 checkpoint of 1. back out
        out = os.path.join(work, "init_export.safetensors")
        sm(binary, "ckpt", "export", init, "--out", out)
        fresh = build_twin(model, T, None)
        state = load_file(out)
        fresh.load_state_dict(state, strict=True)
        compare_state(res, model, "spikemesh -> SJ state dict (export of the import)", fresh.state_dict(), saved)
        print(f"     ({time.time() - t0:.1f} s)", flush=True)
        return
    sm(binary, "train", "--model", model, *cf["var"], "--data", data, "--output", work, "--run-name", "run",
       "--device", "cpu", "--threads", THREADS, "--precision", "fp64", "--batch-size", 4, "--max-steps", 2,
       "--seed", 1, *Tflag, "--init", init)
    ckpt = os.path.join(work, "run", "ckpt_000000002.h5")
    exported = os.path.join(work, "trained.safetensors")
    sm(binary, "ckpt", "export", ckpt, "--out", exported)
    state = load_file(exported)
    trained = build_twin(model, T, cf.get("C"))
    trained.load_state_dict(state, strict=True)  # num_batches_tracked included
    compare_state(res, model, "spikemesh -> SJ state dict", trained.state_dict(), state)
    moved = max(float((state[k].double() - saved[k].double()).abs().max())
                for k in state if state[k].is_floating_point())
    got, _ = sm_eval(binary, ckpt, data, os.path.join(work, "eval_trained.h5"), N)
    want_out, twin_spikes = sj_run(trained, x_test, hook=True)
    want = want_out.mean(0).numpy()
    print(f"     {model}: 2 training steps moved the weights by up to {moved:.3g}", flush=True)
    fires(res, model, "trained SpikingJelly twin", [float(s.mean()) for s in twin_spikes])
    compare_outputs(res, model, "spikemesh -> SJ", got, want, cf["rates"], T)
    print(f"     ({time.time() - t0:.1f} s)", flush=True)

    # ---- 3. NIR
    t0 = time.time()
    from spikingjelly.activation_based.nir_exchange import import_from_nir
    path = os.path.join(work, "trained.nir")
    _, stdout, _ = sm(binary, "ckpt", "export", ckpt, "--out", path)
    print(f"     {stdout.strip()}", flush=True)
    graph = nir.read(path, type_check=True)
    gm = import_from_nir(graph, dt=1e-4, device="cpu", dtype=torch.float64, step_mode="m")
    nir_out, nir_spikes = sj_run(gm, x_test, hook=True)
    nir_mean = nir_out.mean(0).numpy()
    per_layer, hidden_flips = compare_hidden(nir_spikes, twin_spikes)
    n_hidden = sum(s.numel() for s in twin_spikes)
    print(f"     {model}: NIR graph {len(graph.nodes)} nodes; vs the twin of 2.: flipped spikes per neuron layer "
          f"{' '.join(per_layer)} ({hidden_flips} of {n_hidden}; {len(nir_spikes)} vs {len(twin_spikes)} layers), "
          f"output max |diff| {float(np.abs(nir_mean - want).max()):.3g}", flush=True)
    compare_outputs(res, model, "spikemesh -> NIR -> SJ", got, nir_mean, cf["rates"], T)
    if hidden_flips:
        res.rows[-1] = res.rows[-1][:4] + (res.rows[-1][4] + f" ({hidden_flips} hidden spikes flipped)",)
    print(f"     ({time.time() - t0:.1f} s)", flush=True)


def nir_refusal(res, binary, work, seed):
    """fmnist_csnn (max pooling) cannot be expressed in NIR: one error line, exit 1, no file."""
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(seed)
    m = build_twin("fmnist_csnn", 4, 8)
    st = os.path.join(work, "csnn_max.safetensors")
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, st)
    ckpt = os.path.join(work, "csnn_max.h5")
    sm(binary, "ckpt", "import", st, "--model", "fmnist_csnn", "--var", "C=8", "--precision", "fp64", "--out", ckpt)
    out = os.path.join(work, "csnn_max.nir")
    rc, _, err = sm(binary, "ckpt", "export", ckpt, "--out", out, expect_fail=True)
    lines = [ln for ln in err.splitlines() if ln.startswith("spikemesh: error:")]
    why = []
    if rc != 1:
        why.append(f"exit {rc}, want 1")
    if len(lines) != 1:
        why.append(f"{len(lines)} 'spikemesh: error:' lines, want 1")
    elif "conv_fc.3" not in lines[0] or "avgpool2d" not in lines[0]:
        why.append("the error line does not name conv_fc.3 and avgpool2d")
    if os.path.exists(out) or any(f.startswith("csnn_max.nir") for f in os.listdir(work)):
        why.append("a .nir file was left behind")
    ok = not why
    res.line(ok, "fmnist_csnn ckpt export --out x.nir refused", (lines[0] if lines else err.strip()[-300:]) +
             ("" if ok else " -- " + "; ".join(why)))
    res.row("fmnist_csnn", "NIR export of max pooling refused", None, None, ok, "" if ok else "; ".join(why))


# ------------------------------------------------------------------------------ main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "spikemesh"), help="spikemesh binary")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS) +
                    " (the fmnist_csnn NIR refusal check always runs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (emptied first) and keep it")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    import torch
    import nir
    import safetensors
    import spikingjelly
    from importlib.metadata import version
    torch.set_num_threads(THREADS)
    print(f"spikingjelly {version('spikingjelly')} ({os.path.dirname(spikingjelly.__file__)}), torch "
          f"{torch.__version__}, nir {version('nir')}, nirtorch {version('nirtorch')}, safetensors "
          f"{safetensors.__version__}, numpy {np.__version__}")
    binary = os.path.abspath(args.bin)
    print(f"spikemesh: {binary}")
    if not os.path.exists(binary):
        print(f"summary: spikemesh binary missing ({binary}; run make)")
        return 1
    del nir
    if args.keep:
        shutil.rmtree(args.keep, ignore_errors=True)
        os.makedirs(args.keep)
    top = os.path.abspath(args.keep or tempfile.mkdtemp(prefix="interop_check_"))
    res, t_start = Result(), time.time()
    try:
        for model in args.models.split(",") + ["fmnist_csnn"]:
            work = os.path.join(top, model)
            os.makedirs(work)
            print(f"---- {model}", flush=True)
            try:
                if model == "fmnist_csnn":
                    nir_refusal(res, binary, work, args.seed)
                elif model in CONF:
                    round_trip(res, model, binary, work, args.seed)
                else:
                    res.line(False, f"{model}", f"unknown model (choices: {', '.join(MODELS)})")
            except Exception as e:  # noqa: BLE001 — report, continue with the next model
                res.line(False, f"{model} round trip", f"{type(e).__name__}: {e}")
                res.row(model, "round trip", None, None, False, type(e).__name__)
                traceback.print_exc()
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)
    print()
    res.table()
    print(f"summary: {res.n} checks, {len(res.fails)} failed, in {time.time() - t_start:.1f} s"
          + (" (kept " + top + ")" if args.keep else ""))
    for f in res.fails:
        print("  failed: " + f)
    return 1 if res.fails else 0


if __name__ == "__main__":
    sys.exit(main())
