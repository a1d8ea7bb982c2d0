"""Checks of a decoder's hyperparameters and tensors, made before any graph is built.

Hyperparameters the graph builders cannot honour (zero heads, odd RoPE widths...) would become a ggml
assertion, which aborts the process; a repeated block that lost its defining tensor would silently become a
decoder with fewer blocks. Each check raises an `InvalidModelError` naming the file, tensor or value.
"""

from __future__ import annotations

import math
from typing import Any

from kzlab.arch.qwen3_tts_12hz.hparams import _pick
from kzlab.errors import InvalidModelError


def check_hparams(hp: Any, src: str) -> None:
    """Refuse hyperparameters the graph builders would turn into a ggml assertion or a useless graph."""
    ints = {
        "codebook_size": hp.codebook_size,
        "semantic_codebook_size": hp.semantic_codebook_size,
        "vq_dim": hp.vq_dim,
        "codebook_dim": hp.codebook_dim,
        "num_quantizers": hp.num_quantizers,
        "latent_dim": hp.latent_dim,
        "hidden_size": hp.hidden_size,
        "intermediate_size": hp.intermediate_size,
        "num_layers": hp.num_layers,
        "num_heads": hp.num_heads,
        "num_kv_heads": hp.num_kv_heads,
        "head_dim": hp.head_dim,
        "sliding_window": hp.sliding_window,
        "decoder_dim": hp.decoder_dim,
        "sample_rate": hp.sample_rate,
    }
    for name, v in ints.items():
        if not isinstance(v, int) or v < 1:
            raise InvalidModelError(f"{src}: hyperparameter {name} = {v!r}; expected an integer >= 1")
    for name in ("rope_theta", "rms_norm_eps"):
        v = getattr(hp, name)
        if not isinstance(v, float) or not math.isfinite(v) or v <= 0:
            raise InvalidModelError(f"{src}: hyperparameter {name} = {v!r}; expected a finite number > 0")
    if hp.head_dim % 2:
        raise InvalidModelError(f"{src}: head_dim = {hp.head_dim}; RoPE needs an even head width")
    if hp.num_heads % hp.num_kv_heads:
        raise InvalidModelError(
            f"{src}: {hp.num_heads} attention heads cannot share {hp.num_kv_heads} key/value heads evenly"
        )
    if not hp.upsample_rates or any(r < 1 for r in (*hp.upsample_rates, *hp.upsampling_ratios)):
        raise InvalidModelError(
            f"{src}: upsampling factors {list(hp.upsampling_ratios)} / {list(hp.upsample_rates)}; expected >= 1"
        )
    if hp.decoder_dim % 2 ** len(hp.upsample_rates):
        raise InvalidModelError(
            f"{src}: decoder_dim = {hp.decoder_dim} cannot be halved {len(hp.upsample_rates)} times (one per block)"
        )


#: indexed role families: (prefix, first index, the role whose presence defines the count, metadata words,
#: what the metadata count adds, parts of role names that only blocks of the family have)
_FAMILIES = (
    ("vq.rest", 0, "codebook", ("num_quantizers", "n_quantizers", "num_codebooks"), 1, (".codebook",)),
    ("tfm.blk", 0, "attn_q.weight", ("num_hidden_layers", "n_layers", "num_layers"), 0, (".attn_", ".ffn_")),
    ("up", 0, "convt.weight", ("upsampling_ratios",), 0, (".convt.", ".dwconv.", ".pw1.", ".pw2.")),
    ("dec", 1, "convt.weight", ("upsample_rates",), 0, (".convt.", ".res.")),  # dec.N+1 is the final snake
)


def check_counts(hp: Any, meta: dict[str, Any], roles_present: set[str], src: str) -> None:
    """Name the tensor that is missing when a repeated block lost its defining tensor.

    Hyperparameters count blocks by probing indices 0, 1, 2... until one is absent, so a missing tensor
    otherwise shows up as a decoder with fewer blocks (and, with later blocks present, as unrelated
    "extra" tensors). A later index in the file, or a count in the metadata, shows what was meant.
    """
    if hp.num_quantizers == 1 and "vq.rest.output_proj.weight" in roles_present:
        raise InvalidModelError(
            f"{src}: required tensor for role 'vq.rest.0.codebook' is missing (the file has the acoustic "
            "codebooks' output projection, vq.rest.output_proj.weight, but not one acoustic codebook)"
        )
    counts = {
        "vq.rest": hp.num_quantizers - 1,
        "tfm.blk": hp.num_layers,
        "up": len(hp.upsampling_ratios),
        "dec": len(hp.upsample_rates),
    }
    for prefix, first, key, words, offset, parts in _FAMILIES:
        n = counts[prefix]
        missing = f"{prefix}.{first + n}.{key}"
        later = sorted(
            r
            for r in roles_present
            if r.startswith(prefix + ".") and _index(r, prefix) >= first + n and any(q in r for q in parts)
        )
        if later:
            raise InvalidModelError(
                f"{src}: required tensor for role '{missing}' is missing (the file has '{later[0]}' after it)"
            )
        stated = _pick(meta, words)
        if isinstance(stated, list):
            stated = len(stated)
        if isinstance(stated, (int, float)) and not isinstance(stated, bool) and int(stated) != n + offset:
            raise InvalidModelError(
                f"{src}: the metadata says {int(stated)} for {words[0]} but the tensors give {n + offset}: "
                f"required tensor for role '{missing}' is missing"
                if int(stated) > n + offset
                else f"{src}: the metadata says {int(stated)} for {words[0]} but the file has {n + offset}"
            )


def _index(role: str, prefix: str) -> int:
    """The block index in `prefix.N.rest` (-1 when there is none)."""
    part = role[len(prefix) + 1 :].split(".", 1)[0]
    return int(part) if part.isdigit() else -1
