"""Hyperparameters of the Qwen3-TTS-Tokenizer-12Hz decoder.

Files disagree on where (and whether) they store these, and at least one converter writes a wrong value
(`codebook_dim_internal = 256` whatever the checkpoint says), so tensor shapes are the authority: the
widths below are derived from the weights, and metadata only fills in what shapes cannot tell (RoPE base,
norm epsilon, window, how the attention width splits into heads).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kzlab.errors import InvalidModelError


@dataclass(frozen=True)
class HParams:
    """Everything the graph builders need to know about one decoder."""

    #: the decoder family these describe (kzlab.arch)
    family: ClassVar[str] = "qwen3-tts-12hz"

    codebook_size: int = 2048
    semantic_codebook_size: int = 2048
    vq_dim: int = 256  # width of one codebook vector (upstream: codebook_dim // 2)
    codebook_dim: int = 512  # width after the RVQ output projections
    num_quantizers: int = 16
    num_semantic_quantizers: int = 1
    latent_dim: int = 1024
    hidden_size: int = 512
    intermediate_size: int = 1024
    num_layers: int = 8
    num_heads: int = 16
    num_kv_heads: int = 16
    head_dim: int = 64
    sliding_window: int = 72
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    upsampling_ratios: tuple[int, ...] = (2, 2)
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    decoder_dim: int = 1536
    sample_rate: int = 24000

    @property
    def total_upsample(self) -> int:
        """Output samples per code frame (1920 for the shipped model)."""
        n = 1
        for r in (*self.upsampling_ratios, *self.upsample_rates):
            n *= r
        return n

    @property
    def n_blocks(self) -> int:
        """Number of BigVGAN-style decoder blocks (4)."""
        return len(self.upsample_rates)

    def block_channels(self, b: int) -> tuple[int, int]:
        """(c_in, c_out) of decoder block b (1-based as in upstream `decoder.{b}`)."""
        return self.decoder_dim // 2 ** (b - 1), self.decoder_dim // 2**b

    @property
    def out_channels(self) -> int:
        """Channels of the last block's output (96 for the shipped model)."""
        return self.decoder_dim // 2**self.n_blocks

    def codebook_count_hint(self, n: int) -> str:
        """Why codes with n codebooks are refused (kzlab.codes): this family's graph decodes every codebook of the
        file, with no option to take fewer (unlike Mimi's `num_quantizers`)."""
        if n > self.num_quantizers:
            return f"the file has {self.num_quantizers} codebooks"
        return (f"a Qwen3-TTS 12 Hz decoder takes all {self.num_quantizers} codebooks of each frame "
                f"({self.num_semantic_quantizers} semantic, {self.num_quantizers - self.num_semantic_quantizers} "
                "acoustic); kzlab has no option to decode fewer")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["upsampling_ratios"] = list(self.upsampling_ratios)
        d["upsample_rates"] = list(self.upsample_rates)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HParams:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for k in ("upsampling_ratios", "upsample_rates"):
            if k in kw:
                kw[k] = tuple(int(x) for x in kw[k])
        return cls(**kw)


#: metadata words that name a hyperparameter, whatever the dialect's prefix (matched on the last key part)
METADATA_ALIASES: dict[str, tuple[str, ...]] = {
    "num_heads": ("num_attention_heads", "n_heads", "n_head", "num_heads", "attention.head_count"),
    "num_kv_heads": ("num_key_value_heads", "n_kv_heads", "n_head_kv", "attention.head_count_kv"),
    "head_dim": ("head_dim", "attention.key_length"),
    "sliding_window": ("sliding_window", "attention.sliding_window"),
    "rope_theta": ("rope_theta", "rope.freq_base"),
    "rms_norm_eps": ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    "sample_rate": ("output_sample_rate", "sample_rate"),
    "semantic_codebook_size": ("semantic_codebook_size",),
}


def _pick(meta: dict[str, Any], words: tuple[str, ...], decoder_first: bool = True) -> Any:
    """Find a metadata value whose key ends with one of `words`, preferring decoder keys over encoder keys."""
    hits = []
    for key, value in meta.items():
        low = key.lower()
        if "enc." in low or ".encoder." in low or low.startswith("encoder"):
            continue
        for w in words:
            if low == w or low.endswith("." + w):
                hits.append((0 if ("dec" in low) == decoder_first else 1, key, value))
    if not hits:
        return None
    hits.sort(key=lambda h: (h[0], len(h[1])))
    return hits[0][2]


def hparams_from(
    shapes: dict[str, tuple[int, ...]],
    meta: dict[str, Any],
    source: str,
    quirks: dict[str, str] | None = None,
    notes: list[str] | None = None,
) -> HParams:
    """Derive hyperparameters from canonical tensor shapes (torch order), completed by metadata.

    `shapes` maps canonical roles (see `kzlab.arch.qwen3_tts_12hz.roles`) to shapes. Metadata values that contradict the
    shapes are reported with a warning and ignored, except a value the file's layout is known to write wrong
    (`quirks`: name -> why), which is said once in `notes` instead.
    """

    def shape(role: str) -> tuple[int, ...]:
        if role not in shapes:
            raise InvalidModelError(f"{source}: required tensor '{role}' is missing")
        return shapes[role]

    cb = shape("vq.first.codebook")
    proj = shape("vq.first.output_proj.weight")
    n_rest = 0
    while f"vq.rest.{n_rest}.codebook" in shapes:
        n_rest += 1
    rest_cb = shapes.get("vq.rest.0.codebook", cb)
    pre = shape("pre_conv.weight")
    inp = shape("tfm.input_proj.weight")
    n_layers = 0
    while f"tfm.blk.{n_layers}.attn_q.weight" in shapes:
        n_layers += 1
    if n_layers == 0:
        raise InvalidModelError(f"{source}: no transformer layer found (tfm.blk.0.attn_q.weight is missing)")
    q = shape("tfm.blk.0.attn_q.weight")
    k = shape("tfm.blk.0.attn_k.weight")
    gate = shape("tfm.blk.0.ffn_gate.weight")
    ups = []
    i = 0
    while f"up.{i}.convt.weight" in shapes:
        ups.append(int(shapes[f"up.{i}.convt.weight"][2]))
        i += 1
    rates = []
    b = 1
    while f"dec.{b}.convt.weight" in shapes:
        kk = int(shapes[f"dec.{b}.convt.weight"][2])
        if kk % 2:
            raise InvalidModelError(f"{source}: dec.{b}.convt.weight has odd kernel {kk}; expected 2 x rate")
        rates.append(kk // 2)
        b += 1
    if not rates:
        raise InvalidModelError(f"{source}: no decoder block found (dec.1.convt.weight is missing)")
    dec0 = shape("dec.0.conv.weight")

    derived: dict[str, Any] = dict(
        codebook_size=int(rest_cb[0]),
        semantic_codebook_size=int(cb[0]),
        vq_dim=int(cb[1]),
        codebook_dim=int(proj[0]),
        num_quantizers=1 + n_rest,
        num_semantic_quantizers=1,
        latent_dim=int(pre[0]),
        hidden_size=int(inp[0]),
        intermediate_size=int(gate[0]),
        num_layers=n_layers,
        upsampling_ratios=tuple(ups),
        upsample_rates=tuple(rates),
        decoder_dim=int(dec0[0]),
    )
    q_width, kv_width = int(q[0]), int(k[0])
    head_dim = _pick(meta, METADATA_ALIASES["head_dim"])
    n_heads = _pick(meta, METADATA_ALIASES["num_heads"])
    if head_dim is not None and q_width % int(head_dim) == 0 and kv_width % int(head_dim) == 0:
        head_dim = int(head_dim)
    elif n_heads is not None and q_width % int(n_heads) == 0:
        head_dim = q_width // int(n_heads)
    else:
        if head_dim is not None or n_heads is not None:
            warnings.warn(
                f"{source}: attention metadata (head_dim={head_dim}, heads={n_heads}) does not divide the "
                f"q projection width {q_width}; assuming heads of 64",
                stacklevel=3,
            )
        head_dim = 64 if q_width % 64 == 0 else q_width
    derived.update(head_dim=head_dim, num_heads=q_width // head_dim, num_kv_heads=kv_width // head_dim)
    if n_heads is not None and int(n_heads) != derived["num_heads"]:
        warnings.warn(f"{source}: metadata says {n_heads} heads, shapes say {derived['num_heads']}", stacklevel=3)

    for name in ("sliding_window", "rope_theta", "rms_norm_eps", "sample_rate"):
        v = _pick(meta, METADATA_ALIASES[name])
        if v is not None:
            derived[name] = type(getattr(HParams(), name))(v)
    for name in ("rms_norm_eps", "rope_theta"):  # GGUF stores F32: compare files at that precision
        derived[name] = float(np.float32(derived.get(name, getattr(HParams(), name))))

    # report metadata that the shapes contradict (shapes win)
    checks = {
        "codebook_dim": ("codebook_dim",),
        "latent_dim": ("latent_dim",),
        "hidden_size": ("hidden_size", "d_model"),
        "decoder_dim": ("decoder_dim",),
        "intermediate_size": ("intermediate_size", "ff_dim"),
        "codebook_size": ("codebook_size",),
        "vq_dim": ("codebook_dim_internal", "vector_quantization_dim"),
    }
    for name, words in checks.items():
        v = _pick(meta, words)
        if v is not None and not isinstance(v, (list, str)) and int(v) != derived[name]:
            said = f"metadata says {name} = {v} but the tensors say {derived[name]}; using the tensors"
            if quirks and name in quirks:
                if notes is not None:
                    notes.append(f"{said} (a known quirk: {quirks[name]})")
                continue
            warnings.warn(f"{source}: {said}", stacklevel=3)
    return HParams(**derived)


def replace(hp: HParams, **kw: Any) -> HParams:
    """A copy of `hp` with some fields changed."""
    return dataclasses.replace(hp, **kw)


#: hyperparameters a file may not carry, given by the user: name -> type (the widths come from the shapes)
OVERRIDABLE: dict[str, type] = {"num_heads": int, "num_kv_heads": int, "head_dim": int, "sliding_window": int,
                                "rope_theta": float, "rms_norm_eps": float, "sample_rate": int}


__all__ = ["OVERRIDABLE", "HParams", "hparams_from", "replace", "field"]

