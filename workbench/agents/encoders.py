"""Encoders chosen from the observation space: what turns an observation into features.

Every agent builds each of its networks as ``encoder -> head`` through :func:`make_encoder`:

* a **vector** Box (and Discrete / MultiDiscrete / MultiBinary, one-hot as ``gymnasium.spaces.flatten``
  writes them): no encoder module at all, the head is the agent's MLP over the observation, exactly
  as before encoders existed (same weights for the same seed, same checkpoint keys);
* an **image** Box, detected with Stable-Baselines3's rules (:func:`is_image_space`: ``uint8``,
  three dimensions, bounds 0 and 255; channels first when the smallest dimension comes first,
  so ``(4, 84, 84)`` is CHW and ``(16, 16, 3)`` HWC): a CNN that scales by 1/255 inside the network.
  ``"nature"`` is the Nature-DQN encoder (Mnih et al. 2015; 36x36 pixels at least), ``"small"`` a
  one-convolution encoder for small images (MinAtar's 10x10: 3x3 filters). ``"auto"`` takes the
  Nature encoder when the image is large enough and the small one otherwise;
* a **Dict** (or Tuple): one encoder per key (image keys a CNN, the others flattened), their
  features concatenated. A key named ``"action_mask"`` is not an input: it is the env's action mask.
* ``encoder=MyModule``: the user's ``torch.nn.Module`` class, built as
  ``MyModule(observation_space, **encoder_kwargs)``; it receives the batch as tensors in the
  observation's own dtype and shape (a dict of them for a Dict space; images are not scaled) and
  returns ``(batch, features)``; its width is ``features_dim`` when it has one, else measured once.

Observations travel flat (``workbench.envs.flat_observation_space``) in their own dtype: ``uint8``
when every part is ``uint8``, else float32. The encoders read that flat layout.
"""

from __future__ import annotations

import importlib
import json
import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ..devices import compiling
from ..envs.core import flat_observation_space, is_image_space
from ..validation import Constraint
from .kernels.private_torch import weights_version

__all__ = [
    "BUILTIN_ENCODERS",
    "MASK_KEY",
    "DictEncoder",
    "FlatEncoder",
    "ImageEncoder",
    "UserEncoder",
    "describe_encoder",
    "encoder_choice",
    "encoder_path",
    "image_layout",
    "import_encoder",
    "is_image_space",
    "json_object",
    "make_encoder",
    "orthogonal_init",
    "with_encoder",
]

BUILTIN_ENCODERS = ("auto", "nature", "small", "flat")
"""The encoders named by a string: ``"auto"`` (chosen from the space), ``"nature"`` (Nature-DQN
CNN), ``"small"`` (small-image CNN) and ``"flat"`` (the observation itself, flattened, into the MLP)."""

MASK_KEY = "action_mask"
"""A Dict observation key holding the action mask: never an input of the encoder."""

NATURE_MIN_SIZE = 36
"""The smallest height and width the Nature encoder's 8x8/4, 4x4/2, 3x3/1 convolutions accept."""


def encoder_choice() -> Constraint:
    """What ``encoder=`` takes: a built-in name or a ``torch.nn.Module`` subclass."""
    return Constraint(
        "one of " + ", ".join(repr(n) for n in BUILTIN_ENCODERS) + " or a torch.nn.Module subclass",
        lambda v: (isinstance(v, str) and v in BUILTIN_ENCODERS) or (isinstance(v, type) and issubclass(v, nn.Module)),
    )


def json_object() -> Constraint:
    """A dict with string keys and JSON values (what a saved run can hold), such as ``encoder_kwargs``."""

    def test(v: Any) -> bool:
        return isinstance(v, dict) and all(isinstance(k, str) for k in v) and bool(json.dumps(v))

    return Constraint("a dict of JSON values with string keys", test)


def encoder_path(cls: type) -> str:
    """The import path ``"package.module.ClassName"`` a saved run stores for a user encoder."""
    return f"{cls.__module__}.{cls.__qualname__}"


def import_encoder(path: str) -> type[nn.Module]:
    """The class at the import path ``path`` (as :func:`encoder_path` wrote it)."""
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ValueError(f"encoder {path!r} is not an import path such as 'mypkg.encoders.MyEncoder'")
    obj: Any = importlib.import_module(module_name)
    obj = getattr(obj, name)
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise ValueError(f"encoder {path!r} is not a torch.nn.Module subclass")
    return obj


# -- what an observation space is --------------------------------------------------------------


def image_layout(shape: tuple[int, ...]) -> tuple[bool, int, int, int]:
    """``(channels_first, channels, height, width)`` of an image shape: channels first when the
    smallest dimension comes first (SB3's rule), else channels last."""
    first = int(np.argmin(shape)) == 0
    c, h, w = (shape[0], shape[1], shape[2]) if first else (shape[2], shape[0], shape[1])
    return first, int(c), int(h), int(w)


# -- encoders -----------------------------------------------------------------------------------


class _Encoder(nn.Module):
    """Takes ``(..., *in_shape)`` and returns ``(..., features_dim)`` (leading dims kept, for
    sequences), whatever the input's dtype."""

    features_dim: int

    def __init__(self, in_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.in_shape = tuple(in_shape)

    shared = False
    """True when several networks read this one encoder (PPO and A2C's ``share_encoder``): the
    features of the last batch are then reused when the next call gets the very same tensor with
    the weights unchanged and no backward pass through them since, so the actor and the critic run
    the CNN once per batch."""
    _cached: tuple[Any, ...] | None = None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Features of a batch (any leading dimensions) of flat observations."""
        # Not while torch.compile traces: the cache's key (the weights' version counters) changes with every
        # optimizer step, and each change would be a guard failure and a recompile until dynamo gave up.
        shared = self.shared and not compiling()
        version = weights_version(self.parameters()) if shared else None
        shared = version is not None
        if shared:
            key = (torch.is_grad_enabled(), version)
            cached = self._cached
            if cached is not None and cached[0] is obs and cached[1] == key:
                return cached[2]
        lead = obs.shape[: obs.dim() - len(self.in_shape)]
        out = self.encode(obs.reshape(-1, *self.in_shape))
        out = out.reshape(*lead, out.shape[-1])
        if shared:
            self._cached = (obs, key, out)
            if out.requires_grad:  # a backward pass frees the graph: later calls compute afresh
                out.register_hook(self._forget)
        return out

    def _forget(self, grad: torch.Tensor) -> None:
        self._cached = None

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        """Copies (``copy.deepcopy``: export, replicas) leave the cached features behind."""
        state = dict(self.__dict__)
        state.pop("_cached", None)
        return state


class ImageEncoder(_Encoder):
    """A CNN over ``uint8`` images, scaled by 1/255 inside the network, then a linear layer and ReLU.

    ``kind="nature"``: 32 8x8/4, 64 4x4/2, 64 3x3/1 convolutions, 512 features (Mnih et al. 2015;
    SB3's ``NatureCNN``). ``kind="small"``: 16 3x3/1 convolutions, 128 features (MinAtar's network,
    Young and Tian 2019).
    """

    def __init__(self, shape: tuple[int, ...], kind: str = "nature", features_dim: int | None = None) -> None:
        super().__init__(shape)
        self.channels_first, c, h, w = image_layout(shape)
        self.kind = kind
        if kind == "nature":
            if h < NATURE_MIN_SIZE or w < NATURE_MIN_SIZE:
                raise ValueError(
                    f"the Nature CNN encoder needs images of at least {NATURE_MIN_SIZE}x{NATURE_MIN_SIZE} pixels "
                    f"(its 8x8 stride-4, 4x4 stride-2 and 3x3 convolutions leave nothing of a smaller one), got "
                    f"{h}x{w} from the observation shape {tuple(shape)}: use encoder='small' (or 'auto', which "
                    "picks it), or resize the frames"
                )
            self.cnn: nn.Module = nn.Sequential(
                nn.Conv2d(c, 32, 8, stride=4),
                nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2),
                nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1),
                nn.ReLU(),
                nn.Flatten(),
            )
            features_dim = 512 if features_dim is None else features_dim
        elif kind == "small":
            if h < 3 or w < 3:
                raise ValueError(f"the small CNN encoder needs images of at least 3x3 pixels, got {h}x{w}")
            self.cnn = nn.Sequential(nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(), nn.Flatten())
            features_dim = 128 if features_dim is None else features_dim
        else:
            raise ValueError(f"unknown image encoder {kind!r}; choose 'nature' or 'small'")
        with torch.no_grad():
            n_flat = int(self.cnn(torch.zeros(1, c, h, w)).shape[1])
        self.linear = nn.Sequential(nn.Linear(n_flat, features_dim), nn.ReLU())
        self.features_dim = int(features_dim)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 (or float 0..255) images to features."""
        x = x.float() / 255.0
        if not self.channels_first:
            x = x.permute(0, 3, 1, 2)
        return self.linear(self.cnn(x))

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, channels_first={self.channels_first}, features_dim={self.features_dim}"


class _Flat(nn.Module):
    """A part of the observation as it is, flattened, in float32."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.features_dim = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1).float()


class FlatEncoder(_Encoder):
    """The observation as it is, flattened and cast to float32 (``encoder="flat"`` on uint8 frames)."""

    def __init__(self, space: spaces.Space) -> None:
        shape = tuple(space.shape) if isinstance(space, spaces.Box) else (int(spaces.flatdim(space)),)
        super().__init__(shape)
        self.features_dim = int(np.prod(shape))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1).float()


def _parts(space: spaces.Space) -> list[tuple[str, spaces.Space]]:
    if isinstance(space, spaces.Dict):
        return [(str(k), s) for k, s in space.spaces.items()]
    if isinstance(space, spaces.Tuple):
        return [(str(i), s) for i, s in enumerate(space.spaces)]
    return [("", space)]


class DictEncoder(_Encoder):
    """One encoder per key of a Dict (or item of a Tuple) observation, features concatenated.

    It reads the flat layout ``gymnasium.spaces.flatten`` writes (the keys' parts one after the other)
    and skips the key ``"action_mask"``. ``encoders`` maps a key to a built encoder; keys without one
    are flattened as they are."""

    def __init__(self, space: spaces.Space, encoders: dict[str, nn.Module]) -> None:
        super().__init__((int(spaces.flatdim(space)),))
        self.slices: list[tuple[str, int, int, tuple[int, ...]]] = []
        modules: dict[str, nn.Module] = {}
        start = 0
        for key, sub in _parts(space):
            size = int(spaces.flatdim(sub))
            if key != MASK_KEY:
                shape = tuple(sub.shape) if key in encoders else (size,)
                self.slices.append((key, start, start + size, shape))
                modules[key] = encoders.get(key) or _Flat(size)
            start += size
        self.parts = nn.ModuleDict(modules)
        self.features_dim = sum(int(m.features_dim) for m in modules.values())  # type: ignore[misc]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return torch.cat([self.parts[k](x[:, a:b].reshape(n, *shape)) for k, a, b, shape in self.slices], dim=-1)


class UserEncoder(_Encoder):
    """A user's ``nn.Module`` as the encoder: it gets the batch as tensors of the observation's own
    shape and dtype (a dict of them by key for a Dict space, without ``"action_mask"``)."""

    def __init__(self, space: spaces.Space, cls: type[nn.Module], kwargs: dict[str, Any]) -> None:
        flat = int(spaces.flatdim(space)) if not isinstance(space, spaces.Box) else None
        super().__init__((flat,) if flat is not None else tuple(space.shape))
        self.is_box = isinstance(space, spaces.Box)
        self.layout = [] if self.is_box else _dict_layout(space)
        self.net = cls(space, **kwargs)
        self.dtype = flat_dtype(space)
        dim = getattr(self.net, "features_dim", None)
        if dim is None:
            with torch.no_grad():
                dim = self.encode(torch.zeros(1, *self.in_shape, dtype=_torch_dtype(self.dtype))).shape[-1]
        self.features_dim = int(dim)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_box:
            return self.net(x)
        n = x.shape[0]
        return self.net({k: x[:, a:b].reshape(n, *shape) for k, a, b, shape in self.layout})


def _dict_layout(space: spaces.Space) -> list[tuple[str, int, int, tuple[int, ...]]]:
    out, start = [], 0
    for key, sub in _parts(space):
        size = int(spaces.flatdim(sub))
        if key != MASK_KEY:
            shape = tuple(sub.shape) if isinstance(sub, spaces.Box) else (size,)
            out.append((key, start, start + size, shape))
        start += size
    return out


def flat_dtype(space: spaces.Space) -> np.dtype:
    """The dtype observations of ``space`` travel and are stored in (see ``workbench.envs``)."""
    return np.dtype(flat_observation_space(space).dtype)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(1, dtype=dtype)).dtype


# -- choosing -----------------------------------------------------------------------------------


def _image_kind(shape: tuple[int, ...], choice: str) -> str:
    if choice in ("nature", "small"):
        return choice
    _, _, h, w = image_layout(shape)
    return "nature" if min(h, w) >= NATURE_MIN_SIZE else "small"


def make_encoder(space: spaces.Space, choice: Any = "auto", kwargs: dict[str, Any] | None = None) -> nn.Module | None:
    """A fresh encoder for one network over observations of ``space`` (see the module docstring),
    or None when the network's MLP should read the observation itself (vector observations)."""
    kwargs = dict(kwargs or {})
    if isinstance(choice, type):
        return UserEncoder(space, choice, kwargs)
    if choice == "flat":
        # The raw values into the MLP; uint8 frames are cast to float32 first (not scaled).
        return FlatEncoder(space) if flat_dtype(space) == np.uint8 else None
    features = kwargs.get("features_dim")
    if is_image_space(space):
        return ImageEncoder(tuple(space.shape), _image_kind(tuple(space.shape), choice), features)
    if isinstance(space, spaces.Dict | spaces.Tuple):
        parts = _parts(space)
        images = {k: s for k, s in parts if is_image_space(s) and k != MASK_KEY}
        if not images and all(k != MASK_KEY for k, _ in parts):
            return None  # only vectors: the flat observation is already their concatenation
        encoders = {
            k: ImageEncoder(tuple(s.shape), _image_kind(tuple(s.shape), choice), features) for k, s in images.items()
        }
        return DictEncoder(space, encoders)
    if choice in ("nature", "small"):
        raise ValueError(
            f"encoder={choice!r} is a CNN for image observations (a uint8 Box of 3 dimensions with bounds 0 and "
            f"255, channels first or last), but the observation space is {space}: use encoder='auto'"
        )
    return None


def describe_encoder(space: spaces.Space, choice: Any = "auto", kwargs: dict[str, Any] | None = None) -> str:
    """The encoder :func:`make_encoder` picks, in words (shown in ``repr(agent)`` and saved in meta.json)."""
    if isinstance(choice, type):
        return f"custom {encoder_path(choice)}"
    if choice == "flat":
        return "mlp"

    def one(sub: spaces.Space) -> str:
        if is_image_space(sub):
            first, c, h, w = image_layout(tuple(sub.shape))
            kind = _image_kind(tuple(sub.shape), choice)
            return f"{kind}_cnn({c}x{h}x{w} {'CHW' if first else 'HWC'} uint8)"
        if isinstance(sub, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
            return f"one_hot({spaces.flatdim(sub)})"
        return f"flat({int(math.prod(sub.shape)) if sub.shape else spaces.flatdim(sub)})"

    if isinstance(space, spaces.Dict | spaces.Tuple):
        return "dict(" + ", ".join(f"{k}: {one(s)}" for k, s in _parts(space) if k != MASK_KEY) + ")"
    if is_image_space(space):
        return one(space)
    return "mlp" if isinstance(space, spaces.Box) else one(space)


def orthogonal_init(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    """Orthogonal weights (``gain``) and zero biases for every convolution and linear layer of
    ``module`` (what SB3 does to its features extractor when ``ortho_init=True``)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.orthogonal_(m.weight, gain)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def with_encoder(encoder: nn.Module | None, head: nn.Module) -> nn.Module:
    """``encoder -> head`` as one ``nn.Sequential`` (the head's layers follow the encoder, so
    ``net[:-1]`` is still everything but the output layer); the head alone without an encoder."""
    if encoder is None:
        return head
    if isinstance(head, nn.Sequential):
        return nn.Sequential(encoder, *head)
    return nn.Sequential(encoder, head)
