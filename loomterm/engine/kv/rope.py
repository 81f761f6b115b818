"""Re-rotating cached keys to new positions ("re-rope").

With rotary position embeddings a key at position ``p`` is ``R(p) k``, a rotation of
each pair of channels by ``p * inv_freq``. Rotations compose, so moving a cached key by
``d`` positions is ``R(d) R(p) k = R(p + d) k``: no forward pass needed. Conventions
differ between model families:

- ``half``: channel ``i`` pairs with ``i + rot/2`` (``rotate_half``; Llama, Qwen,
  Mistral, Phi, GPT-NeoX);
- ``interleaved``: channel ``2i`` pairs with ``2i + 1`` (GPT-J);
- partial rotary: only the first ``rot`` channels of each head rotate (GPT-NeoX, Phi,
  GPT-J's ``rotary_dim``).

Scaled RoPE variants that only change ``inv_freq`` (linear, llama3, YaRN) stay
shift-invariant. YaRN's attention factor multiplies cos and sin; it is already inside
the cached keys, so it is not applied again here. Dynamic NTK and LongRoPE change the
frequencies with the sequence length, so they are not shift-invariant and never re-roped.

Which convention a model uses is not taken on trust: ``probe_rope`` computes the KV of
a few tokens at two offsets and accepts a convention only if re-rotating one gives the
other. Models that pass none (absolute positions, unknown schemes) are recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

UNSHIFTABLE_ROPE_TYPES = {"dynamic", "longrope"}


@dataclass(frozen=True)
class RopeSpec:
    """How a model rotates its keys.

    Attributes:
        convention: ``"half"`` or ``"interleaved"``.
        inv_freq: (rot/2,) float32 frequencies, on the model's device.
    """

    convention: str
    inv_freq: torch.Tensor

    @property
    def rotary_dim(self) -> int:
        return 2 * self.inv_freq.shape[0]


def rerotate(keys: torch.Tensor, delta: int | torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """Keys rotated by ``delta`` more positions. ``keys``: (..., T, D). ``delta`` is an
    int, or a (T,) tensor of per-token shifts. Math in float32, result in keys' dtype."""
    rot = spec.rotary_dim
    if isinstance(delta, int):
        angles = float(delta) * spec.inv_freq  # (rot/2,)
    else:
        angles = delta.to(spec.inv_freq)[:, None] * spec.inv_freq  # (T, rot/2)
    cos, sin = angles.cos(), angles.sin()
    k = keys.float()
    k_rot, k_pass = k[..., :rot], k[..., rot:]  # (..., T, rot), (..., T, D-rot)
    if spec.convention == "half":
        half = rot // 2
        x1, x2 = k_rot[..., :half], k_rot[..., half:]  # (..., T, rot/2) each
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    else:
        x1, x2 = k_rot[..., 0::2], k_rot[..., 1::2]  # (..., T, rot/2) each
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)
    return torch.cat([out, k_pass], dim=-1).to(keys.dtype)


def rerotate_kv(kv: torch.Tensor, delta: int | torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """A node KV tensor (L, 2, H, T, D) with its keys moved by ``delta`` positions."""
    out = kv.clone()
    out[:, 0] = rerotate(kv[:, 0], delta, spec)  # (L, H, T, D)
    return out


def candidate_specs(model) -> list[RopeSpec]:
    """Conventions worth probing for ``model``, most likely first."""
    config = model.config.get_text_config(decoder=True)
    rope_params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    rope_type = (rope_params or {}).get("rope_type") or (rope_params or {}).get("type")
    if rope_type in UNSHIFTABLE_ROPE_TYPES:
        return []
    freqs: list[torch.Tensor] = []
    for module in model.modules():
        inv = getattr(module, "inv_freq", None)
        if isinstance(inv, torch.Tensor) and inv.ndim == 1:
            freqs.append(inv.detach().float())
            break
    if not freqs:
        rotary_dim = getattr(config, "rotary_dim", None)
        if rotary_dim:  # GPT-J keeps a sinusoid table, not inv_freq
            base = float(getattr(config, "rope_theta", None) or 10000.0)
            steps = torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim
            freqs.append(1.0 / (base**steps))
    device = next(model.parameters()).device
    specs = []
    for inv in freqs:
        for convention in ("half", "interleaved"):
            specs.append(RopeSpec(convention, inv.to(device)))
    return specs


def probe_rope(model, compute_kv, vocab_size: int) -> RopeSpec | None:
    """Find the convention under which shifting equals recomputing, or None.

    ``compute_kv(tokens, offset)`` returns the (L, 2, H, T, D) KV of ``tokens`` placed
    at positions ``offset..offset+T-1`` with nothing before them.
    """
    candidates = candidate_specs(model)
    if not candidates:
        return None
    gen = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, vocab_size, (12,), generator=gen).tolist()
    shift = 37
    base = compute_kv(tokens, 0)
    moved = compute_kv(tokens, shift)
    scale = moved[:, 0].float().abs().amax().clamp_min(1e-6)
    tol = 2e-3 if base.dtype == torch.float32 else 3e-2
    for spec in candidates:
        rotated = rerotate(base[:, 0], shift, spec)  # (L, H, T, D)
        err = (rotated.float() - moved[:, 0].float()).abs().amax() / scale
        values_err = (base[:, 1].float() - moved[:, 1].float()).abs().amax() / scale
        if err < tol and values_err < tol:
            return spec
    return None
