"""Memories for RecurrentPPO beyond its LSTM: a GRU and a gated Transformer-XL (GTrXL).

Each memory is a module with one interface (the LSTM network of ``recurrent_ppo.py`` has it too):

- ``state_shape``: the shape of one env's state, ``(rows, width)``; zeros are the state of a new episode;
- ``forward(x, state, starts)``: ``x`` is ``(T, B, in_dim)``, ``state`` ``(B, *state_shape)`` the state
  before step 0, ``starts[t]`` is 1 where an episode begins at step ``t`` (the memory forgets all
  before it); returns the outputs ``(T, B, width)`` and the state after the last step. ``T == 1``
  is acting; a longer ``T`` is the update replaying a rollout, and gives the outputs that acting
  step by step gave (tested).

The GTrXL (Parisotto et al. 2020, "Stabilizing Transformers for Reinforcement Learning") keeps per
env and per layer a window of the ``memory_length`` last inputs of that layer (Transformer-XL's
cached memory, Dai et al. 2019). Each step attends to itself and to the steps of the window that
belong to its episode, with a learned bias per head and distance (relative positions: the same
weights for a step whatever its place in the rollout). Layer norms sit before attention and MLP
(the paper's "identity map reordering") and GRU-type gates replace the residual sums, with the
update gate biased towards the identity at first (``b_g = 2``, the paper's value).

Its state packs, per env, one row holding how many window steps belong to the current episode
(zero for a new one, as ``begin_episode`` zeroes the state) and ``memory_layers * memory_length``
rows of cached layer inputs.
"""

from __future__ import annotations

import math
from itertools import pairwise

import torch
from torch import nn

from .networks import mlp

__all__ = ["GRUMemory", "GTrXLMemory", "MemoryNetwork", "episode_cuts"]


def episode_cuts(starts: torch.Tensor) -> list[int]:
    """The steps ``0 = a < b < ... < T`` between which no env's episode begins (after step 0): a
    recurrent cell runs each stretch in one call, its state zeroed at the cut where an env starts."""
    steps = starts.shape[0]
    return [0, *(torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist(), steps]


class GRUMemory(nn.Module):
    """A one-layer GRU; its state is the hidden vector, ``(1, hidden)`` per env."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.gru = nn.GRU(in_dim, hidden)
        self.width = hidden
        self.state_shape = (1, hidden)

    def forward(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unroll from ``state`` ``(B, 1, H)``, zeroing it where an episode begins."""
        h = state.transpose(0, 1)  # (1, B, H): num_layers first, as nn.GRU holds it
        outs = []
        for a, b in pairwise(episode_cuts(starts)):
            if b <= a:
                continue
            h = h * (1.0 - starts[a]).view(1, -1, 1)
            out, h = self.gru(x[a:b], h)
            outs.append(out)
        return torch.cat(outs), h.transpose(0, 1)


class _Gate(nn.Module):
    """GTrXL's GRU-type gate ``g(x, y)``: how much of the sublayer's output ``y`` replaces the
    stream ``x``; the update gate's bias ``b_g`` starts the layer close to the identity."""

    def __init__(self, dim: int, bias: float = 2.0) -> None:
        super().__init__()
        self.w = nn.Linear(dim, 3 * dim, bias=False)  # W_r, W_z, W_g applied to y
        self.u_rz = nn.Linear(dim, 2 * dim, bias=False)  # U_r, U_z applied to x
        self.u_g = nn.Linear(dim, dim, bias=False)  # U_g applied to r * x
        self.b_g = nn.Parameter(torch.full((dim,), float(bias)))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        wr, wz, wg = self.w(y).chunk(3, dim=-1)
        ur, uz = self.u_rz(x).chunk(2, dim=-1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.b_g)
        h = torch.tanh(wg + self.u_g(r * x))
        return (1.0 - z) * x + z * h


class _GatedLayer(nn.Module):
    """One GTrXL layer: relative multi-head attention over the window then a gated MLP."""

    def __init__(self, dim: int, heads: int, window: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm_attention = nn.LayerNorm(dim)
        self.query = nn.Linear(dim, dim)
        self.key_value = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        # A learned bias per head and distance 0..window: relative positions (Transformer-XL's
        # idea in its simplest form), so a step is treated alike wherever it falls in a rollout.
        # Started as ALiBi's slopes (Press et al. 2022: head h = 1..heads penalizes distance by 2^(-8h/heads)):
        # from zeros a long window was averaged flat at first and learning which steps matter was slow
        # (CartPoleNoVel, 30k steps: 104 with a window of 32 against 397 with 4, before this start).
        slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads)
        self.distance_bias = nn.Parameter(-slopes.view(-1, 1) * torch.arange(window + 1).view(1, -1))
        self.gate_attention = _Gate(dim)
        self.norm_mlp = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.gate_mlp = _Gate(dim)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor, distance: torch.Tensor
    ) -> torch.Tensor:
        """``x`` ``(B, T, D)``, ``memory`` ``(B, M, D)``; ``allowed`` ``(B, T, M + T)`` which keys
        each step sees, ``distance`` ``(T, M + T)`` how far back each key lies (clamped)."""
        batch, steps, dim = x.shape
        heads, head_dim = self.heads, dim // self.heads
        # Stop-gradient on the cached window (the paper's SG(M)): it was computed by earlier steps.
        normed = self.norm_attention(torch.cat([memory.detach(), x], dim=1))
        q = self.query(normed[:, -steps:]).view(batch, steps, heads, head_dim).transpose(1, 2)
        k, v = self.key_value(normed).view(batch, -1, 2, heads, head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim) + self.distance_bias[:, distance]
        scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))
        attended = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, steps, dim)
        x = self.gate_attention(x, torch.relu(self.out(attended)))
        return self.gate_mlp(x, torch.relu(self.mlp(self.norm_mlp(x))))


class GTrXLMemory(nn.Module):
    """A gated Transformer-XL over a window of ``window`` past steps per env (see the module's docstring)."""

    def __init__(self, in_dim: int, dim: int, layers: int, heads: int, window: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(
                f"the GTrXL's width lstm_hidden_size={dim} must be a multiple of attention_heads={heads}; "
                f"choose e.g. attention_heads={math.gcd(dim, heads)}"
            )
        self.embed = nn.Linear(in_dim, dim)
        self.layers = nn.ModuleList([_GatedLayer(dim, heads, window) for _ in range(layers)])
        self.window = window
        self.width = dim
        self.state_shape = (1 + layers * window, dim)

    def forward(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend over the window and the sequence's own steps; returns the outputs and the window
        after the last step (the last ``window`` inputs of each layer, and how many of them belong
        to the episode that goes on)."""
        steps, batch = x.shape[:2]
        window, device = self.window, x.device
        seen = state[:, 0, 0]  # (B,) window steps of the current episode
        memories = state[:, 1:].view(batch, len(self.layers), window, self.width)
        # Key j lies at time j - window (the window before step 0, then the sequence itself); the
        # first step of each query's episode is the last start at or before it, or -seen.
        key_time = torch.arange(-window, steps, device=device)
        query_time = torch.arange(steps, device=device)
        marks = torch.where(starts > 0, query_time.view(-1, 1).float(), -seen.view(1, -1).expand(steps, -1))
        # One step (acting, and the ONNX export, which has no cummax) needs no running maximum.
        episode_start = marks.t() if steps == 1 else torch.cummax(marks, dim=0).values.t()  # (B, T)
        behind = query_time.view(-1, 1) - key_time.view(1, -1)  # (T, M + T)
        allowed = (behind >= 0) & (behind <= window)
        allowed = allowed.unsqueeze(0) & (key_time.view(1, 1, -1) >= episode_start.unsqueeze(-1))
        distance = behind.clamp(0, window)
        h = self.embed(x).transpose(0, 1)  # (B, T, D)
        new_memories = []
        for i, layer in enumerate(self.layers):
            keys = torch.cat([memories[:, i], h], dim=1)
            new_memories.append(keys[:, -window:])
            h = layer(h, memories[:, i], allowed, distance)
        # After the sequence the episode going on has seen the steps since its start (at most the window).
        last_start = episode_start[:, -1]
        now_seen = (steps - last_start).clamp(max=window)
        # Slots older than the episode are zeroed, as begin_episode zeroes them when acting step by
        # step: the state a rollout replay reaches is then the one acting reached, exactly.
        ours = torch.arange(window, device=device).view(1, -1) >= (window - now_seen).view(-1, 1)
        cached = torch.stack(new_memories, 1) * ours.view(batch, 1, window, 1)
        new_state = torch.cat([now_seen.view(batch, 1, 1).expand(batch, 1, self.width), cached.flatten(1, 2)], dim=1)
        return h.transpose(0, 1), new_state


class MemoryNetwork(nn.Module):
    """An optional encoder, a memory (:class:`GRUMemory` or :class:`GTrXLMemory`) then an MLP head:
    ``(T, B, ...)`` observations and ``(B, *state_shape)`` states to ``(T, B, out_dim)`` outputs."""

    def __init__(
        self,
        memory: nn.Module,
        net_arch: tuple[int, ...],
        out_dim: int,
        encoder: nn.Module | None = None,
        **mlp_options: object,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.memory = memory
        self.head = mlp(memory.width, net_arch, out_dim, **mlp_options)  # type: ignore[arg-type]

    @property
    def state_shape(self) -> tuple[int, int]:
        """One env's state shape (zeros: a new episode)."""
        return self.memory.state_shape  # type: ignore[return-value]

    def forward(
        self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs for every step and the state after the last one."""
        if self.encoder is not None:
            obs = self.encoder(obs)
        out, state = self.memory(obs, state, starts)
        return self.head(out), state

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The agent's call, shared with the LSTM network: the same as ``forward``."""
        return self(obs, state, starts)
