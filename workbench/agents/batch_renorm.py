"""Batch renormalization, the layer CrossQ puts before every linear layer, and a context manager for modes.

Batch renormalization is Ioffe 2017's; CrossQ (Bhatt et al. 2024) puts it before every linear layer of its actor
and critics. :func:`in_mode` holds a module in training or eval mode for a block.

Batch normalization in training mode standardizes with the batch's statistics; in eval mode with running
averages. When the two differ (early in training, or when the batch mixes distributions: CrossQ feeds
current and next state-action pairs in one batch) the network learns on one normalization and acts on
another. Batch *re*normalization corrects the batch statistics towards the running ones: with
``r = std_B / std_run`` clipped to ``[1/r_max, r_max]`` and ``d = (mean_B - mean_run) / std_run`` clipped to
``[-d_max, d_max]`` (both without gradient), it normalizes with the mean ``mean_B - d sqrt(var_B) / r`` and the
variance ``var_B / r^2``, which is Ioffe's ``x_hat * r + d`` but for where ``eps`` enters. That form, the batch
variance with Bessel's correction (in the normalization and in the running statistics) and the warm-up of
plain batch normalization for the first ``warmup_steps`` + 1 training batches are sb3-contrib's
(``sb3_contrib.common.torch_layers.BatchRenorm``), and so are the constants: momentum 0.01, eps 0.001, r_max 3,
d_max 5, warm-up 100k. docs/algorithms.md says where the paper's own (JAX) code differs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["BatchRenorm1d", "in_mode"]


class BatchRenorm1d(nn.Module):
    """Batch renormalization over the features of ``(batch, num_features)`` inputs.

    In training mode it normalizes with the batch's statistics, corrected by ``r`` and ``d`` once more than
    ``warmup_steps`` training batches have been seen, and updates the running mean and variance with
    ``momentum``; in eval mode it normalizes with the running statistics alone (so acting on one
    observation is well defined). The running statistics and the count of batches are buffers: they are
    saved, loaded and sent to workers with the weights. ``affine`` adds a learned scale and shift.
    """

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float = 0.01,
        eps: float = 0.001,
        warmup_steps: int = 100_000,
        r_max: float = 3.0,
        d_max: float = 5.0,
        affine: bool = True,
    ) -> None:
        super().__init__()
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"BatchRenorm1d momentum must be in (0, 1], got {momentum}")
        self.num_features = int(num_features)
        self.momentum, self.eps = float(momentum), float(eps)
        self.warmup_steps, self.r_max, self.d_max = int(warmup_steps), float(r_max), float(d_max)
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalized ``x``, same shape."""
        if self.training:
            # Bessel's correction as sb3-contrib's layer (x.var's default); the paper's own code divides by n.
            # A batch of one has no spread: variance 0, where the correction would divide by zero.
            # The variance is the mean squared deviation written out: the statistic x.var(0) gives (to float
            # rounding), but with its gradient about 2.5x faster on a CPU than x.var's kernel (measured on
            # 512 x 256 batches, one thread), which was a sixth of CrossQ's gradient step.
            batch_mean = x.mean(0)
            batch_var = (x - batch_mean).pow(2).sum(0) / max(x.shape[0] - 1, 1)
            # Strictly more batches than the warm-up before the corrections, as sb3-contrib counts. The test is a
            # tensor, not a Python branch, so a compiled network keeps one graph: during the warm-up r is 1 and
            # d is 0, and the corrected statistics below are the batch's to the bit (and so are the gradients).
            corrected = self.num_batches_tracked > self.warmup_steps
            with torch.no_grad():
                running_std = (self.running_var + self.eps).sqrt()
                r = ((batch_var + self.eps).sqrt() / running_std).clamp(1.0 / self.r_max, self.r_max)
                d = ((batch_mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max)
                r = torch.where(corrected, r, 1.0)
                d = torch.where(corrected, d, 0.0)
            # The corrections moved into the statistics (sb3-contrib's and the paper's code's form), so eps
            # is added to the corrected variance; the batch's std keeps its gradient through the mean.
            # sqrt's gradient is infinite at 0, and a feature constant over the batch (a convolution over
            # a constant border, after its ReLU) would send NaN into the layers before: there the std is 0
            # with no gradient, the same value, where sb3-contrib's layer gives NaN.
            varies = batch_var > 0
            batch_std = torch.where(varies, torch.where(varies, batch_var, 1.0).sqrt(), 0.0)
            mean = batch_mean - d * batch_std / r
            var = batch_var / r**2
            with torch.no_grad():  # the running statistics follow the batches, outside the graph
                self.running_mean.lerp_(batch_mean.detach(), self.momentum)
                self.running_var.lerp_(batch_var.detach(), self.momentum)
                self.num_batches_tracked += 1
        else:
            mean, var = self.running_mean, self.running_var
        x_hat = (x - mean) / (var + self.eps).sqrt()
        if self.weight is not None and self.bias is not None:
            x_hat = x_hat * self.weight + self.bias
        return x_hat

    def extra_repr(self) -> str:
        return f"{self.num_features}, momentum={self.momentum}, eps={self.eps}, warmup_steps={self.warmup_steps}"


@contextlib.contextmanager
def in_mode(module: nn.Module, training: bool) -> Iterator[nn.Module]:
    """Within the block ``module`` (and every submodule) is in training (``True``) or eval mode; each
    submodule's own mode comes back afterwards."""
    before = [(m, m.training) for m in module.modules()]
    module.train(training)
    try:
        yield module
    finally:
        for m, mode in before:
            m.training = mode
