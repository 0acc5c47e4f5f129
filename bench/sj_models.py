"""sj_models.py — spikemesh's built-in models written with SpikingJelly's own public layers and
neurons (multi-step mode), for the peer benchmarks (bench/sj_bench.py, bench/sj_distributed.py):
the VGG from `layer.*` + `neuron.LIFNode`, Spikformer as SpikingJelly's own `model.spikformer`,
the Fashion-MNIST CSNN as SpikingJelly's `examples/conv_fashion_mnist.py` builds it.

No spikemesh code: only `spikingjelly.activation_based` {layer, neuron, surrogate, functional}.
State-dict names and shapes equal spikemesh's (input/models/*.toml, the parity twins of
tests/parity/torch_models.py), so a state dict exported from spikemesh (HDF5 /params,
/buffers) loads with `load_spikemesh_state`. Neurons use SpikingJelly's automatic dispatch
(`functional.lif_multi_step`: its registered CPU/CUDA/Triton operator where one applies, the
torch reference otherwise).
"""
import torch
import torch.nn as nn
from spikingjelly.activation_based import functional, layer, neuron, surrogate

MODEL_CHOICES = ("cifar10dvs_vgg", "spikformer_ti", "spikformer_s", "fmnist_csnn")

# spikformer_*: (E, heads, depth) of docs/semantics.md §3 / input/models/spikformer_*.toml
SPIKFORMER_SIZES = {"spikformer_ti": (256, 8, 4), "spikformer_s": (384, 12, 6)}

# (in, out, avg-pool first) per block — docs/semantics.md §2
VGG_PLAN = [(2, 64, False), (64, 128, False), (128, 256, True), (256, 256, False),
            (256, 512, True), (512, 512, False), (512, 512, True), (512, 512, False)]


def vgg_lif():
    """The VGG's LIF (docs/semantics.md §2): tau 1.333, decay_input false, hard reset 0, detach_reset,
    ATan(2)."""
    return neuron.LIFNode(tau=1.333, decay_input=False, v_threshold=1.0, v_reset=0.0,
                          surrogate_function=surrogate.ATan(alpha=2.0), detach_reset=True,
                          step_mode="m")


class VGGBlock(nn.Module):
    """[AvgPool2d(2)] -> Conv2d 3x3 pad 1 (bias) -> BatchNorm2d -> LIF on [T, N, C, H, W].
    Names: proj_bn.{0: conv, 1: bn} or, pooled first, proj_bn.{0: pool, 1: conv, 2: bn}."""

    def __init__(self, cin, cout, avg_pool_first):
        super().__init__()
        mods = [layer.AvgPool2d(2, step_mode="m")] if avg_pool_first else []
        mods += [layer.Conv2d(cin, cout, 3, 1, 1, bias=True, step_mode="m"),
                 layer.BatchNorm2d(cout, eps=1e-5, momentum=0.1, step_mode="m")]
        self.proj_bn = nn.Sequential(*mods)
        self.neuron = vgg_lif()

    def forward(self, x_seq):
        return self.neuron(self.proj_bn(x_seq))


class CIFAR10DVSVGG(nn.Module):
    """[T, N, 2, 48, 48] -> [T, N, 10]. With dropout p > 0 the classifier is
    {0: Dropout(p) (one mask for all time steps), 1: Linear}, else {0: Linear} — spikemesh's names."""

    def __init__(self, dropout=0.25, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(*[VGGBlock(i, o, p) for i, o, p in VGG_PLAN],
                                      layer.AvgPool2d(2, step_mode="m"))
        self.flatten = layer.Flatten(start_dim=1, step_mode="m")  # per time step: [N, 4608]
        self.classifier = nn.Sequential(*([layer.Dropout(dropout, step_mode="m")] if dropout > 0 else []),
                                        layer.Linear(512 * 3 * 3, num_classes, step_mode="m"))
        self.init_like_spec()

    def init_like_spec(self):
        """Kaiming-normal (fan_out, relu) conv weights, zero biases, BN 1/0
        (docs/semantics.md §2)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x_seq):
        x = self.features(x_seq)   # [T, N, 512, 3, 3]
        x = self.flatten(x)        # [T, N, 4608]
        return self.classifier(x)  # [T, N, classes]


def build_spikformer(name, T, image_size=224, num_classes=1000):
    """SpikingJelly 2.0's own Spikformer (model.spikformer.Spikformer: its patch stem, its
    SpikingSelfAttention, its MLP; default LIF neurons), patch 16 — the same names, shapes and
    parameter count as spikemesh's input/models/<name>.toml. Input [T, N, 3, S, S]."""
    from spikingjelly.activation_based.model.spikformer import Spikformer
    E, heads, depth = SPIKFORMER_SIZES[name]
    model = Spikformer(T=T, in_channels=3, img_size_h=image_size, img_size_w=image_size, patch_size=16,
                       num_classes=num_classes, embed_dims=E, num_heads=heads, mlp_ratio=4.0, depths=depth)
    return model, dict(input_shape=(3, image_size, image_size), classes=num_classes, dropout=0.0, static=True)


class CSNN(nn.Module):
    """SpikingJelly's Fashion-MNIST CSNN (examples/conv_fashion_mnist.py, docs/semantics.md §4):
    conv_fc = 2 x [Conv2d 3x3 pad 1 (no bias) -> BN -> IF -> MaxPool(2)] -> Flatten ->
    Linear(C·7·7, C·4·4) -> IF -> Linear(C·4·4, 10) -> IF, on [T, N, 1, 28, 28]; IF: hard reset 0,
    ATan(2), no detach_reset. The example's own module is not imported (it pulls in tensorboard);
    this one has its layers under its names. pool="avg": AvgPool2d(2, 2) in place of both max
    pools (spikemesh's fmnist_csnn_avgpool, the NIR-exportable variant; same names and shapes)."""

    def __init__(self, channels=128, pool="max"):
        super().__init__()
        c = channels
        if pool not in ("max", "avg"):
            raise ValueError(f"CSNN pool={pool!r}: 'max' or 'avg'")

        def pool2d():
            return (layer.MaxPool2d if pool == "max" else layer.AvgPool2d)(2, 2, step_mode="m")

        def if_node():
            return neuron.IFNode(v_threshold=1.0, v_reset=0.0, surrogate_function=surrogate.ATan(alpha=2.0),
                                 detach_reset=False, step_mode="m")

        self.conv_fc = nn.Sequential(
            layer.Conv2d(1, c, 3, padding=1, bias=False, step_mode="m"), layer.BatchNorm2d(c, step_mode="m"),
            if_node(), pool2d(),
            layer.Conv2d(c, c, 3, padding=1, bias=False, step_mode="m"), layer.BatchNorm2d(c, step_mode="m"),
            if_node(), pool2d(),
            layer.Flatten(step_mode="m"),
            layer.Linear(c * 7 * 7, c * 4 * 4, bias=False, step_mode="m"), if_node(),
            layer.Linear(c * 4 * 4, 10, bias=False, step_mode="m"), if_node())

    def forward(self, x_seq):
        return self.conv_fc(x_seq)  # [T, N, 10] spikes


def build_model(name, dropout=None, T=4, image_size=224, num_classes=1000):
    """(module, info) with info = {input_shape, classes, dropout, static}."""
    if name in SPIKFORMER_SIZES:
        if dropout:
            raise SystemExit("--dropout: Spikformer has no dropout layer")
        return build_spikformer(name, T, image_size, num_classes)
    if name == "fmnist_csnn":
        return CSNN(), dict(input_shape=(1, 28, 28), classes=10, dropout=0.0, static=True, loss="rate_mse")
    if name != "cifar10dvs_vgg":
        raise SystemExit(f"sj_models: model {name!r} has no SpikingJelly twin (choices: {MODEL_CHOICES})")
    p = 0.25 if dropout is None else dropout
    if not 0 <= p < 1:
        raise SystemExit(f"--dropout {p}: must be in [0, 1)")
    return CIFAR10DVSVGG(dropout=p), dict(input_shape=(2, 48, 48), classes=10, dropout=p, static=False)


def rate_mse_loss(out, y):
    """rate_mse (docs/semantics.md §1): MSE between the firing rate over T and one-hot labels."""
    return nn.functional.mse_loss(out.mean(0), nn.functional.one_hot(y, out.shape[-1]).float())


def loss_of(info):
    """The loss of a model's info: rate_mse for the CSNN, mean_ce otherwise."""
    return rate_mse_loss if info.get("loss") == "rate_mse" else mean_ce_loss


def mean_ce_loss(out, y):
    """Cross-entropy of the mean over T (out [T, N, K], y [N]) — docs/semantics.md §1."""
    return nn.functional.cross_entropy(out.mean(0), y)


def reset(model):
    """Reset every neuron's membrane state (between steps, as SpikingJelly's scripts do)."""
    functional.reset_net(model)


def load_spikemesh_state(model, h5_path, params_group="params", buffers_group="buffers"):
    """Load a spikemesh HDF5 state dict (datasets named as the state dict, under /params and
    /buffers; `spikemesh dump-grads` writes them) into `model`; every key must match."""
    import h5py
    import numpy as np
    state = {}
    with h5py.File(h5_path, "r") as f:
        for group in (params_group, buffers_group):
            if group not in f:
                continue
            # np.asarray: scalars (num_batches_tracked is an i64 scalar) become 0-d arrays
            f[group].visititems(lambda k, d: state.__setitem__(k.replace("/", "."), torch.as_tensor(np.asarray(d[()])))
                                if isinstance(d, h5py.Dataset) else None)
    own = model.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    extra = [k for k in state if k not in own]
    if missing or extra:
        raise SystemExit(f"{h5_path}: state dict does not match the SpikingJelly model "
                         f"(missing {missing[:5]}, unexpected {extra[:5]})")
    for k, v in state.items():
        own[k] = v.to(own[k].dtype).reshape(own[k].shape)
    model.load_state_dict(own)
