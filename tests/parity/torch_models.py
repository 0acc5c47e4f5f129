"""torch_models.py — plain-PyTorch twins of spikemesh's built-in models, for the parity test.

SpikingJelly is not available here, so this file re-implements what the parity test needs the
way SpikingJelly's "torch" backend does it: multi-step neurons as a per-time-step Python loop
(charge, fire through a Heaviside with a surrogate gradient, reset), autograd doing BPTT.
Nothing here shares code with spikemesh; only the state-dict names are shared, and they are
chosen to equal the names in input/models/<name>.toml (whose header comments give the
equivalent SpikingJelly module) so that `load_state_dict(strict=True)` fails loudly if the two
ever disagree.

Conventions (docs/semantics.md §1, §5):
  * activations are time-major [T, N, ...]; stateless layers see [T*N, ...] (multi-step);
  * BatchNorm statistics per channel over T*N*H*W (a BatchNorm on the flattened batch);
  * the classifier is applied per time step, so the model output is [T, N, K].
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------- surrogates
class _HeavisideATan(torch.autograd.Function):
    """Forward: step(u) = (u >= 0). Backward: ATan(alpha) derivative alpha/2 / (1 + (pi/2 alpha u)^2)."""

    @staticmethod
    def forward(ctx, u, alpha):
        ctx.save_for_backward(u)
        ctx.alpha = alpha
        return (u >= 0).to(u.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (u,) = ctx.saved_tensors
        a = ctx.alpha
        sg = (a / 2) / (1 + (math.pi / 2 * a * u).square())
        return grad_out * sg, None


class _HeavisideSigmoid(torch.autograd.Function):
    """Forward: step(u). Backward: Sigmoid(alpha) derivative alpha * s * (1 - s), s = sigmoid(alpha u)."""

    @staticmethod
    def forward(ctx, u, alpha):
        ctx.save_for_backward(u)
        ctx.alpha = alpha
        return (u >= 0).to(u.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (u,) = ctx.saved_tensors
        a = ctx.alpha
        s = torch.sigmoid(a * u)
        return grad_out * (a * s * (1 - s)), None


def heaviside(u, surrogate, alpha):
    if surrogate == "atan":
        return _HeavisideATan.apply(u, alpha)
    if surrogate == "sigmoid":
        return _HeavisideSigmoid.apply(u, alpha)
    raise ValueError(f"unknown surrogate {surrogate!r}")


# ---------------------------------------------------------------------------- neurons
class MultiStepNeuron(nn.Module):
    """Multi-step LIF / IF over x_seq [T, N, ...], returning spikes [T, N, ...].

    charge (LIF, decay_input):     h = v + (x - (v - v_reset)) / tau
    charge (LIF, not decay_input): h = v - (v - v_reset) / tau + x
    charge (IF):                   h = v + x
    fire:  s = step(h - v_th) (surrogate gradient)
    reset: hard: v = s_r * v_reset + (1 - s_r) * h; soft: v = h - s_r * v_th,
           s_r = s.detach() when detach_reset else s.
    The membrane starts at v_reset (hard) or 0 (soft) for every forward (reset_state).
    """

    def __init__(self, kind="lif", tau=2.0, decay_input=True, v_threshold=1.0, v_reset=0.0,
                 detach_reset=False, surrogate="sigmoid", alpha=4.0):
        super().__init__()
        assert kind in ("lif", "if"), kind
        self.kind, self.tau, self.decay_input = kind, tau, decay_input
        self.v_threshold, self.v_reset, self.detach_reset = v_threshold, v_reset, detach_reset
        self.surrogate, self.alpha = surrogate, alpha

    def charge(self, x, v):
        if self.kind == "if":
            return v + x
        vr = 0.0 if self.v_reset is None else self.v_reset
        if self.decay_input:
            return v + (x - (v - vr)) / self.tau
        return v - (v - vr) / self.tau + x

    def forward(self, x_seq):
        v = torch.full_like(x_seq[0], 0.0 if self.v_reset is None else self.v_reset)
        spikes = []
        for t in range(x_seq.shape[0]):
            h = self.charge(x_seq[t], v)
            s = heaviside(h - self.v_threshold, self.surrogate, self.alpha)
            s_r = s.detach() if self.detach_reset else s
            if self.v_reset is None:
                v = h - s_r * self.v_threshold
            else:
                v = s_r * self.v_reset + (1 - s_r) * h
            spikes.append(s)
        return torch.stack(spikes)

    def extra_repr(self):
        return (f"{self.kind}, tau={self.tau}, decay_input={self.decay_input}, "
                f"v_th={self.v_threshold}, v_reset={self.v_reset}, detach_reset={self.detach_reset}, "
                f"surrogate={self.surrogate}({self.alpha})")


def reference_neuron_loop(x_seq, n: MultiStepNeuron):
    """Independent check of MultiStepNeuron: the docs/semantics.md §5 recurrence written with
    r = 1/tau, forward and hand-written BPTT, for a given upstream gradient (used by self_test)."""
    r = 1.0 / n.tau
    vr = 0.0 if n.v_reset is None else n.v_reset

    def sg(u):
        a = n.alpha
        if n.surrogate == "atan":
            return (a / 2) / (1 + (math.pi / 2 * a * u) ** 2)
        s = torch.sigmoid(a * u)
        return a * s * (1 - s)

    T = x_seq.shape[0]
    v = torch.full_like(x_seq[0], vr)
    hs, ss = [], []
    for t in range(T):
        if n.kind == "if":
            h = v + x_seq[t]
        elif n.decay_input:
            h = v + r * (x_seq[t] - (v - vr))
        else:
            h = v - r * (v - vr) + x_seq[t]
        s = (h >= n.v_threshold).to(x_seq.dtype)
        v = s * vr + (1 - s) * h if n.v_reset is not None else h - s * n.v_threshold
        hs.append(h)
        ss.append(s)

    def backward(grad_s):
        leak = 0.0 if n.kind == "if" else r
        gx = torch.zeros_like(x_seq)
        gv = torch.zeros_like(x_seq[0])
        for t in reversed(range(T)):
            g = sg(hs[t] - n.v_threshold)
            if n.v_reset is not None:
                dv_dh = (1 - ss[t]) + (0 if n.detach_reset else (vr - hs[t]) * g)
            else:
                dv_dh = 1 - (0 if n.detach_reset else n.v_threshold * g)
            gh = grad_s[t] * g + gv * dv_dh
            gx[t] = gh * (r if (n.kind != "if" and n.decay_input) else 1.0)
            gv = gh * (1 - leak)
        return gx

    return torch.stack(ss), backward


# ---------------------------------------------------------------------------- layers
class _MultiStep:
    """Applies a stateless layer to [T, N, ...] by flattening to [T*N, ...] (SpikingJelly's
    multi-step layer.Conv2d etc.); the module itself is the torch one, so names do not change."""

    def forward(self, x_seq):
        T, N = x_seq.shape[0], x_seq.shape[1]
        y = super().forward(x_seq.flatten(0, 1))
        return y.view(T, N, *y.shape[1:])


class Conv2d(_MultiStep, nn.Conv2d):
    pass


class BatchNorm2d(_MultiStep, nn.BatchNorm2d):
    """Statistics per channel over T*N*H*W (the flattened batch)."""


class AvgPool2d(_MultiStep, nn.AvgPool2d):
    pass


class MaxPool2d(_MultiStep, nn.MaxPool2d):
    pass


class Flatten(nn.Module):
    """[T, N, C, H, W] -> [T, N, C*H*W] (channel-major, torch.flatten(x, 2))."""

    def forward(self, x_seq):
        return x_seq.flatten(2)


# nn.Linear acts on the last dim, so it is multi-step as it is.


# ---------------------------------------------------------------------------- models
class VGGBlock(nn.Module):
    """[AvgPool2d(2)] -> Conv2d 3x3 pad 1 (bias) -> BatchNorm2d -> LIF (docs/semantics.md §2).
    Names: proj_bn.{0: conv, 1: bn} or, pooled first, proj_bn.{0: pool, 1: conv, 2: bn}."""

    def __init__(self, cin, cout, avg_pool_first):
        super().__init__()
        layers = [AvgPool2d(2)] if avg_pool_first else []
        layers += [Conv2d(cin, cout, 3, 1, 1, bias=True), BatchNorm2d(cout, eps=1e-5, momentum=0.1)]
        self.proj_bn = nn.Sequential(*layers)
        self.neuron = MultiStepNeuron(kind="lif", tau=1.333, decay_input=False, v_threshold=1.0, v_reset=0.0,
                                      detach_reset=True, surrogate="atan", alpha=2.0)

    def forward(self, x_seq):
        return self.neuron(self.proj_bn(x_seq))


class CIFAR10DVSVGG(nn.Module):
    """input [T, N, 2, 48, 48] -> [T, N, 10]; dropout 0 (parity) leaves the Linear at classifier.0."""

    def __init__(self, dropout=0.0):
        super().__init__()
        assert dropout == 0.0, "the parity twin is deterministic: dropout 0"
        plan = [(2, 64, False), (64, 128, False), (128, 256, True), (256, 256, False),
                (256, 512, True), (512, 512, False), (512, 512, True), (512, 512, False)]
        self.features = nn.Sequential(*[VGGBlock(i, o, p) for i, o, p in plan], AvgPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(512 * 3 * 3, 10))

    def forward(self, x_seq):
        x = self.features(x_seq)  # [T, N, 512, 3, 3]
        x = x.flatten(2)          # [T, N, 4608]
        return self.classifier(x)  # [T, N, 10]


def _if_node():
    return MultiStepNeuron(kind="if", v_threshold=1.0, v_reset=0.0, detach_reset=False,
                           surrogate="atan", alpha=2.0)


class CSNN(nn.Module):
    """Fashion-MNIST CSNN: input [T, N, 1, 28, 28] (a static image repeated) -> spikes [T, N, 10]."""

    def __init__(self, C=128):
        super().__init__()
        self.conv_fc = nn.Sequential(
            Conv2d(1, C, 3, padding=1, bias=False), BatchNorm2d(C), _if_node(), MaxPool2d(2, 2),
            Conv2d(C, C, 3, padding=1, bias=False), BatchNorm2d(C), _if_node(), MaxPool2d(2, 2),
            Flatten(), nn.Linear(C * 7 * 7, C * 4 * 4, bias=False), _if_node(),
            nn.Linear(C * 4 * 4, 10, bias=False), _if_node())

    def forward(self, x_seq):
        return self.conv_fc(x_seq)


# ---------------------------------------------------------------------------- Spikformer
class Conv1d(_MultiStep, nn.Conv1d):
    pass


class BatchNorm1d(_MultiStep, nn.BatchNorm1d):
    """[T*N, C, L]: statistics per channel over T*N*L."""


def _sf_lif(v_threshold=1.0):
    """Spikformer's LIF (docs/semantics.md §3): tau 2, decay_input, detach_reset, hard reset 0,
    Sigmoid(4)."""
    return MultiStepNeuron(kind="lif", tau=2.0, decay_input=True, v_threshold=v_threshold, v_reset=0.0,
                           detach_reset=True, surrogate="sigmoid", alpha=4.0)


class _ConvBN(nn.Module):
    """conv_bn.block = {0: Conv2d 3x3 pad 1 (no bias), 1: BN2d, [2: MaxPool2d(3, 2, 1)]}."""

    def __init__(self, cin, cout, pool):
        super().__init__()
        mods = [Conv2d(cin, cout, 3, 1, 1, bias=False), BatchNorm2d(cout)]
        self.block = nn.Sequential(*(mods + ([MaxPool2d(3, 2, 1)] if pool else [])))


class _ConvBNLIF(nn.Module):
    def __init__(self, cin, cout, pool):
        super().__init__()
        self.conv_bn = _ConvBN(cin, cout, pool)
        self.neuron = _sf_lif()

    def forward(self, x_seq):
        return self.neuron(self.conv_bn.block(x_seq))


class SpikformerStem(nn.Module):
    """[T, N, Cin, H, W] -> tokens [T, N, E, H/16 * W/16]; stages E/8, E/4, E/2, E, then
    x + positional_encoding(x)."""

    def __init__(self, in_channels, E):
        super().__init__()
        chans = [in_channels, E // 8, E // 4, E // 2, E]
        self.stages = nn.Sequential(*[_ConvBNLIF(chans[i], chans[i + 1], True) for i in range(4)])
        self.positional_encoding = _ConvBNLIF(E, E, False)

    def forward(self, x_seq):
        x = self.stages(x_seq)
        x = x + self.positional_encoding(x)
        return x.flatten(3)


class SpikingSelfAttention(nn.Module):
    """qkv = LIF(BN1d(Conv1d(E, 3E))) -> per head out = (V Kᵀ) Q * scale (no softmax) -> LIF(v_th 0.5)
    -> LIF(BN1d(Conv1d(E, E))). Channel index of qkv: part*E + head*d + j (q, k, v)."""

    def __init__(self, E, heads, scale=0.125):
        super().__init__()
        self.heads, self.scale = heads, scale
        self.qkv_conv_bn = nn.Sequential(Conv1d(E, 3 * E, 1, bias=False), BatchNorm1d(3 * E))
        self.qkv_lif = _sf_lif()
        self.attn_lif = _sf_lif(0.5)
        self.proj_conv_bn = nn.Sequential(Conv1d(E, E, 1, bias=False), BatchNorm1d(E))
        self.proj_lif = _sf_lif()

    def forward(self, x):  # [T, N, E, L]
        T, N, E, L = x.shape
        qkv = self.qkv_lif(self.qkv_conv_bn(x))                  # [T, N, 3E, L]
        q, k, v = qkv.reshape(T, N, 3, self.heads, E // self.heads, L).unbind(2)  # [T, N, h, d, L]
        out = (v @ k.transpose(-2, -1)) @ q * self.scale          # [T, N, h, d, L]
        out = self.attn_lif(out.reshape(T, N, E, L))
        return self.proj_lif(self.proj_conv_bn(out))


class SpikformerMLP(nn.Module):
    def __init__(self, E, hidden):
        super().__init__()
        self.fc1 = nn.Sequential(Conv1d(E, hidden, 1, bias=False), BatchNorm1d(hidden))
        self.fc1_lif = _sf_lif()
        self.fc2 = nn.Sequential(Conv1d(hidden, E, 1, bias=False), BatchNorm1d(E))
        self.fc2_lif = _sf_lif()

    def forward(self, x):
        return self.fc2_lif(self.fc2(self.fc1_lif(self.fc1(x))))


class SpikformerBlock(nn.Module):
    def __init__(self, E, heads, scale=0.125):
        super().__init__()
        self.attn = SpikingSelfAttention(E, heads, scale)
        self.mlp = SpikformerMLP(E, 4 * E)

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)


class Spikformer(nn.Module):
    """spikformer_ti/s (docs/semantics.md §3; names of SpikingJelly 2.0's
    model.spikformer.Spikformer): [T, N, Cin, S, S] -> [T, N, classes]; head = Linear on the
    mean over the tokens."""

    def __init__(self, E=256, heads=8, depth=4, image_size=224, num_classes=1000, in_channels=3, scale=0.125):
        super().__init__()
        self.patch_embed = SpikformerStem(in_channels, E)
        self.blocks = nn.ModuleList([SpikformerBlock(E, heads, scale) for _ in range(depth)])
        self.head = nn.Linear(E, num_classes)

    def forward(self, x_seq):
        x = self.patch_embed(x_seq)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(-1))  # [T, N, classes]


MODELS = {
    "cifar10dvs_vgg": dict(build=CIFAR10DVSVGG, input_shape=(2, 48, 48), classes=10, loss="mean_ce"),
    "fmnist_csnn": dict(build=CSNN, input_shape=(1, 28, 28), classes=10, loss="rate_mse"),
    # image size, classes and channels are spec vars: a case gives them (see torch_parity.CASES)
    "spikformer_ti": dict(build=Spikformer, input_shape=(3, 224, 224), classes=1000, loss="mean_ce"),
}


# ---------------------------------------------------------------------------- losses
def model_loss(name, out, y):
    """out: [T, N, K] -> scalar; mean_ce: CE of the mean over T; rate_mse: MSE of the rate vs one-hot."""
    rate = out.mean(0)
    if name == "mean_ce":
        return F.cross_entropy(rate, y)
    if name == "rate_mse":
        return F.mse_loss(rate, F.one_hot(y, rate.shape[1]).to(rate.dtype))
    raise ValueError(f"unknown loss {name!r}")


# ---------------------------------------------------------------------------- self test
def self_test():
    """MultiStepNeuron (autograd through the per-step loop) against the docs/semantics.md §5
    recurrence with hand-written BPTT, for each neuron flavour the models use and a few they
    do not.
    Returns {config: max relative error over spikes and input gradient}."""
    configs = {
        "lif atan tau1.333 no-decay-input detach": dict(kind="lif", tau=1.333, decay_input=False,
                                                        detach_reset=True, surrogate="atan", alpha=2.0),
        "lif sigmoid tau2 decay-input": dict(kind="lif", tau=2.0, decay_input=True, detach_reset=False,
                                             surrogate="sigmoid", alpha=4.0),
        "lif sigmoid tau2 decay-input detach": dict(kind="lif", tau=2.0, decay_input=True, detach_reset=True,
                                                    surrogate="sigmoid", alpha=4.0),
        "if atan": dict(kind="if", surrogate="atan", alpha=2.0),
        "if atan detach": dict(kind="if", surrogate="atan", alpha=2.0, detach_reset=True),
        "lif atan soft reset": dict(kind="lif", tau=2.0, v_reset=None, surrogate="atan", alpha=2.0),
    }
    g = torch.Generator().manual_seed(3)
    errs = {}
    for name, cfg in configs.items():
        n = MultiStepNeuron(**cfg)
        x = (torch.rand(6, 3, 7, generator=g, dtype=torch.float64) * 2.4 - 0.4).requires_grad_(True)
        grad_s = torch.randn(6, 3, 7, generator=g, dtype=torch.float64)
        s = n(x)
        s.backward(grad_s)
        s_ref, bptt = reference_neuron_loop(x.detach(), n)
        gx_ref = bptt(grad_s)
        assert 0 < float(s_ref.mean()) < 1, "self-test input should make some, not all, neurons fire"
        err = max(float((s.detach() - s_ref).abs().max()),
                  float((x.grad - gx_ref).abs().max() / gx_ref.abs().max()))
        errs[name] = err
    return errs
