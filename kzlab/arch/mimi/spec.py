"""Mimi (Kyutai's codec) decoder: the data half (hyperparameters, roles, checks, stages, the `Arch` record).

Mimi is the decoder of Moshi, Sesame CSM and PocketTTS. Its decode path (transformers 4.57.3
`MimiModel.decode`, pocket-tts 4.0.1 `MimiModel.decode_from_latent`; tests/data/mimi-tiny/UPSTREAM.md and
tests/data/pockettts-tiny/UPSTREAM.md have every fact with its source line):

1. the input, one of two kinds:
   - codes [n_q, T] (kyutai/mimi, Moshi, CSM): a split RVQ, one semantic codebook and up to 31 acoustic ones;
     each branch sums its codebooks' rows (embed_sum / max(usage, 1e-5)) and projects them (a 1x1 conv without
     bias, codebook_dim -> hidden); the two branches are added;
   - continuous latents [32, T] (PocketTTS): denormalised, `x * emb_std + emb_mean` per channel, then
     `quant_out` (a 1x1 conv without bias, 32 -> hidden);
2. `upsample`: a depthwise transposed conv (kernel 2 x stride, no bias, causal: the right tail trimmed), stride 2
   (12.5 -> 25 Hz, kyutai/mimi) or 16 (12.5 -> 200 Hz, PocketTTS);
3. the decoder transformer: pre-norm layers (LayerNorm with bias, eps 1e-5), multi-head self-attention without
   bias, RoPE (rotate-half in transformers, interleaved pairs in pocket-tts), causal over a window of `context`
   steps (250), layer scale; an MLP without bias (GELU: exact erf in transformers, tanh in pocket-tts), layer
   scale; no final norm;
4. the SEANet decoder: a causal conv (kernel 7), then per ratio an ELU, a causal transposed conv (kernel 2 x
   ratio) and residual units `x + conv1x1(ELU(conv_k(ELU(x))))` (hidden C / compress), then ELU and a causal
   conv to one channel (kernel 3). No clamp, no tanh. Every conv pads zeros on the left (causal), so the whole
   decode is causal and streams with its state carried.

Every size is read from the tensor shapes (widths, counts, kernels; the ratios are the transposed convs' kernels
/ 2) or the metadata (heads, window, RoPE base, epsilon, sample rate); what a file leaves to its runtime's
hard-coded values, its layout map gives and `kzlab info` says.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kzlab.arch import Stage
from kzlab.errors import InvalidModelError
from kzlab.model.model import Role, Weight

ARCH_NAME = "mimi"
#: transformers' clamp of a codebook's usage before dividing (modeling_mimi.py:1186, 1201)
USAGE_EPS = 1e-5


@dataclass(frozen=True)
class MimiHParams:
    """The sizes of one Mimi decoder (defaults: kyutai/mimi, transformers' MimiConfig defaults)."""

    family: ClassVar[str] = ARCH_NAME

    #: "codes" (RVQ codebooks) or "latent" (PocketTTS's continuous latents)
    input: str = "codes"
    #: the most codebooks a decode uses (codes [n, T], 1 <= n <= num_quantizers: the first n, `for_codebooks`);
    #: the file may hold more (`file_quantizers`), and `--hparam num_quantizers=N` caps a decode at N of them
    num_quantizers: int = 32
    file_quantizers: int = 32
    num_semantic: int = 1
    codebook_size: int = 2048
    codebook_dim: int = 256
    latent_dim: int = 32  # a latent input's channels
    hidden: int = 512  # the latent after the projection, the transformer's width, the SEANet's input
    num_layers: int = 8
    num_heads: int = 8
    head_dim: int = 64
    intermediate_size: int = 2048
    #: the attention's window in transformer steps (the step itself and context - 1 before it)
    context: int = 250
    rope_theta: float = 10000.0
    #: 1: RoPE on adjacent pairs (pocket-tts, ggml mode 0); 0: on the two halves (transformers, NeoX)
    rope_interleaved: int = 0
    #: 1: GELU's tanh form (pocket-tts); 0: the exact erf form (transformers)
    gelu_tanh: int = 0
    norm_eps: float = 1e-5
    upsample_stride: int = 2
    upsample_kernel: int = 4
    #: the SEANet's first conv's output channels, kernel, its ratios (decoder order), residual units per ratio,
    #: the residual conv's kernel, the dilation base (unit m has dilation base**m), the last conv's kernel
    seanet_channels: int = 1024
    kernel_size: int = 7
    ratios: tuple[int, ...] = (8, 6, 5, 4)
    residual_layers: int = 1
    residual_kernel: int = 3
    dilation_base: int = 2
    compress: int = 2
    last_kernel: int = 3
    sample_rate: int = 24000

    @property
    def semantic_codebook_size(self) -> int:
        return self.codebook_size

    @property
    def takes_codes(self) -> bool:
        """Whether the first stage takes codes; else float latents [input_channels, T] (kzlab.codes)."""
        return self.input == "codes"

    @property
    def input_channels(self) -> int:
        return self.num_quantizers if self.input == "codes" else self.latent_dim

    @property
    def n_blocks(self) -> int:
        return len(self.ratios)

    @property
    def num_filters(self) -> int:
        return self.seanet_channels // 2 ** self.n_blocks

    def block_channels(self, j: int) -> tuple[int, int]:
        """(c_in, c_out) of SEANet block j (1-based)."""
        return self.seanet_channels // 2 ** (j - 1), self.seanet_channels // 2**j

    @property
    def samples_per_frame(self) -> int:
        return self.upsample_stride * math.prod(self.ratios)

    def dilation(self, m: int) -> int:
        return self.dilation_base**m

    @property
    def n_acoustic_used(self) -> int:
        return max(0, self.num_quantizers - self.num_semantic)

    @property
    def min_quantizers(self) -> int:
        """The fewest codebooks codes may have (kzlab.codes.codebook_range): one. transformers 4.57.3 decodes
        whatever count it is given: `MimiSplitResidualVectorQuantizer.decode` gives the semantic RVQ
        `codes[:, :num_semantic]` and the acoustic RVQ the rest, if any (modeling_mimi.py:1347-1356), and each RVQ
        sums the codebooks it is given by position (:1289-1300), so n codebooks are the file's first n."""
        return 1 if self.input == "codes" else self.num_quantizers

    def for_codebooks(self, n: int) -> MimiHParams:
        """The hyperparameters of a decode of codes with n codebooks (1 <= n <= num_quantizers, checked by
        kzlab.codes): the graph built for the first n (`graph.quantizer` reads rows 0..n-1). The file's codebooks
        (`file_quantizers`) and so its roles and weights stay as they are."""
        if self.input != "codes" or not 1 <= n <= self.num_quantizers:
            raise ValueError(f"{n} codebooks: this decoder decodes 1 to {self.num_quantizers}")
        return dataclasses.replace(self, num_quantizers=int(n))

    def codebook_count_hint(self, n: int) -> str:
        """What takes codes with n codebooks when this decoder does not (kzlab.codes' refusal says it)."""
        if n > self.file_quantizers:
            return (f"the file has {self.file_quantizers} codebooks ({self.num_semantic} semantic, "
                    f"{self.file_quantizers - self.num_semantic} acoustic)")
        if n > self.num_quantizers:
            return (f"this decoder was loaded to use at most {self.num_quantizers} of the file's "
                    f"{self.file_quantizers} codebooks (num_quantizers={self.num_quantizers}, given with --hparam or "
                    f"hparams=); load it without num_quantizers to decode {n}")
        return ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ratios"] = list(self.ratios)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MimiHParams:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "ratios" in kw:
            kw["ratios"] = tuple(int(x) for x in kw["ratios"])
        return cls(**kw)


#: metadata keys that state a hyperparameter, in the order they are tried: codec.cpp's `codec.*`, a Hugging Face
#: config.json (as `decoder.*`, kzlab.formats.reader.config_metadata), CrispASR's `pocket_tts.mimi.*`, llama.cpp's
#: mmproj `clip.gen.audio.*` (its projector is the whole PocketTTS generator, decoder included), kzlab's own
METADATA_KEYS: dict[str, tuple[str, ...]] = {
    "num_heads": ("codec.num_attention_heads", "decoder.num_attention_heads", "pocket_tts.mimi.xfmr_num_heads",
                  "clip.gen.audio.attention.head_count", "mimi.attention.head_count"),
    "head_dim": ("codec.head_dim", "decoder.head_dim", "mimi.attention.key_length"),
    "context": ("decoder.sliding_window", "pocket_tts.mimi.xfmr_context", "mimi.attention.sliding_window"),
    "rope_theta": ("decoder.rope_theta", "codec.rope_theta", "mimi.rope.freq_base"),
    "norm_eps": ("decoder.norm_eps", "clip.gen.audio.attention.layer_norm_epsilon",
                 "mimi.attention.layer_norm_epsilon"),
    "sample_rate": ("codec.sample_rate", "decoder.sampling_rate", "pocket_tts.mimi.sample_rate", "mimi.sample_rate"),
    "dilation_base": ("decoder.dilation_growth_rate", "pocket_tts.mimi.seanet_dilation_base"),
    "num_semantic": ("codec.num_semantic_quantizers", "decoder.num_semantic_quantizers"),
}
#: the metadata's word for GELU's form (a Hugging Face config's hidden_act)
GELU_KEYS = ("decoder.hidden_act",)


def _meta(meta: dict[str, Any], name: str) -> Any:
    for k in METADATA_KEYS[name]:
        if k in meta and meta[k] is not None:
            return meta[k]
    return None


def _count(shapes: dict[str, tuple[int, ...]], fmt: str) -> int:
    n = 0
    while fmt.format(n) in shapes:
        n += 1
    return n


def hparams_from(
    shapes: dict[str, tuple[int, ...]], meta: dict[str, Any], source: str,
    quirks: dict[str, str] | None = None, notes: list[str] | None = None,
) -> MimiHParams:
    """Sizes from the canonical shapes (torch order) and the metadata; what neither says is the default (kyutai's
    value), said in `notes`."""
    notes = notes if notes is not None else []

    def shape(role: str) -> tuple[int, ...]:
        if role not in shapes:
            raise InvalidModelError(f"{source}: required tensor for role '{role}' is missing")
        return shapes[role]

    d = MimiHParams()
    kw: dict[str, Any] = {}
    if "latent.output_proj.weight" in shapes:
        kw["input"] = "latent"
        hidden, latent_dim = shape("latent.output_proj.weight")[:2]
        kw |= {"latent_dim": int(latent_dim), "hidden": int(hidden), "num_quantizers": 0, "file_quantizers": 0,
               "num_semantic": 0, "codebook_size": 0, "codebook_dim": 0}
    elif "vq.semantic.0.codebook" in shapes:
        n_sem = _count(shapes, "vq.semantic.{}.codebook")
        n_ac = _count(shapes, "vq.acoustic.{}.codebook")
        size, dim = shape("vq.semantic.0.codebook")[:2]
        proj = shapes.get("vq.semantic.output_proj.weight")
        hidden = int(proj[0]) if proj is not None else int(dim)
        stated = _meta(meta, "num_semantic")
        if stated is not None and int(stated) != n_sem:
            raise InvalidModelError(
                f"{source}: the metadata says {int(stated)} semantic codebooks, the file has {n_sem}"
            )
        kw |= {"num_quantizers": n_sem + n_ac, "file_quantizers": n_sem + n_ac, "num_semantic": n_sem,
               "codebook_size": int(size), "codebook_dim": int(dim), "hidden": hidden}
    else:
        raise InvalidModelError(
            f"{source}: neither codebooks (role 'vq.semantic.0.codebook') nor a latent projection (role "
            "'latent.output_proj.weight'): not a Mimi decoder's input"
        )
    up = shape("upsample.dwconv.weight")
    kw["upsample_kernel"] = int(up[-1])
    kw["upsample_stride"] = max(1, int(up[-1]) // 2)
    n_layers = _count(shapes, "tfm.blk.{}.attn_q.weight")
    kw["num_layers"] = n_layers
    if n_layers:
        q = shape("tfm.blk.0.attn_q.weight")
        kw["intermediate_size"] = int(shape("tfm.blk.0.ffn_up.weight")[0])
        heads, head_dim = _meta(meta, "num_heads"), _meta(meta, "head_dim")
        if heads is None and head_dim:
            heads = int(q[0]) // int(head_dim)
        if heads is None:
            heads = max(1, int(q[0]) // 64)
            notes.append(f"no head count in the metadata: {heads} heads of 64 (Mimi's head width)")
        kw["num_heads"] = int(heads)
        kw["head_dim"] = int(q[0]) // max(int(heads), 1)
    for name in ("context", "rope_theta", "norm_eps", "sample_rate", "dilation_base"):
        v = _meta(meta, name)
        if v is None:
            if name in ("context", "rope_theta", "norm_eps") and n_layers:
                notes.append(f"no {name} in the metadata: using {getattr(d, name)}")
            continue
        kw[name] = float(np.float32(v)) if name in ("rope_theta", "norm_eps") else int(v)
    act = next((meta[k] for k in GELU_KEYS if k in meta), None)
    if isinstance(act, str):
        kw["gelu_tanh"] = int(act in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"))
    c0, _, k0 = shape("dec.0.conv.weight")[:3]
    kw["seanet_channels"], kw["kernel_size"] = int(c0), int(k0)
    n_blocks = 0
    while f"dec.{n_blocks + 1}.convt.weight" in shapes:
        n_blocks += 1
    if n_blocks == 0:
        raise InvalidModelError(f"{source}: no SEANet upsampling block (role 'dec.1.convt.weight' is missing)")
    ratios = []
    for j in range(1, n_blocks + 1):
        k = int(shape(f"dec.{j}.convt.weight")[2])
        if k % 2:
            raise InvalidModelError(f"{source}: block {j}'s transposed conv has kernel {k}; Mimi's is 2 x its ratio")
        ratios.append(k // 2)
    kw["ratios"] = tuple(ratios)
    kw["residual_layers"] = _count(shapes, "dec.1.res.{}.conv1.weight")
    if kw["residual_layers"]:
        r1 = shape("dec.1.res.0.conv1.weight")
        kw["residual_kernel"] = int(r1[2])
        kw["compress"] = max(1, int(r1[1]) // max(int(r1[0]), 1))
    last = shape(f"dec.{n_blocks + 1}.conv.weight")
    kw["last_kernel"] = int(last[2])
    return dataclasses.replace(d, **kw)


def decoder_roles(hp: MimiHParams) -> list[Role]:
    """Every canonical role in graph order (torch shapes: conv [out, in, k], transposed conv [in, out, k],
    depthwise [C, 1, k], linear [out, in], codebook [size, dim])."""
    r: list[Role] = []

    def add(name: str, shape: Sequence[int], kind: str, optional: bool = False) -> None:
        r.append(Role(name, tuple(int(s) for s in shape), kind, optional))

    H = hp.hidden
    if hp.input == "codes":
        n_ac = hp.file_quantizers - hp.num_semantic
        for branch, n in (("semantic", hp.num_semantic), ("acoustic", n_ac)):
            for i in range(n):
                add(f"vq.{branch}.{i}.codebook", (hp.codebook_size, hp.codebook_dim), "codebook")
                add(f"vq.{branch}.{i}.usage", (hp.codebook_size,), "usage", True)
            if n:
                add(f"vq.{branch}.output_proj.weight", (H, hp.codebook_dim), "linear", hp.codebook_dim == H)
    else:
        add("latent.emb_std", (hp.latent_dim,), "vector")
        add("latent.emb_mean", (hp.latent_dim,), "vector")
        add("latent.output_proj.weight", (H, hp.latent_dim), "linear")
    add("upsample.dwconv.weight", (H, 1, hp.upsample_kernel), "dwconv")
    D = hp.num_heads * hp.head_dim
    for i in range(hp.num_layers):
        p = f"tfm.blk.{i}."
        add(p + "attn_norm.weight", (H,), "vector")
        add(p + "attn_norm.bias", (H,), "vector")
        for w in ("q", "k", "v"):
            add(p + f"attn_{w}.weight", (D, H), "linear")
        add(p + "attn_o.weight", (H, D), "linear")
        add(p + "attn_scale", (H,), "vector")
        add(p + "ffn_norm.weight", (H,), "vector")
        add(p + "ffn_norm.bias", (H,), "vector")
        add(p + "ffn_up.weight", (hp.intermediate_size, H), "linear")
        add(p + "ffn_down.weight", (H, hp.intermediate_size), "linear")
        add(p + "ffn_scale", (H,), "vector")
    add("dec.0.conv.weight", (hp.seanet_channels, H, hp.kernel_size), "conv")
    add("dec.0.conv.bias", (hp.seanet_channels,), "vector")
    for j, ratio in enumerate(hp.ratios, start=1):
        cin, cout = hp.block_channels(j)
        p = f"dec.{j}."
        add(p + "convt.weight", (cin, cout, 2 * ratio), "convt")
        add(p + "convt.bias", (cout,), "vector")
        for m in range(hp.residual_layers):
            q = f"{p}res.{m}."
            add(q + "conv1.weight", (cout // hp.compress, cout, hp.residual_kernel), "conv")
            add(q + "conv1.bias", (cout // hp.compress,), "vector")
            add(q + "conv2.weight", (cout, cout // hp.compress, 1), "conv")
            add(q + "conv2.bias", (cout,), "vector")
    last = hp.n_blocks + 1
    add(f"dec.{last}.conv.weight", (1, hp.num_filters, hp.last_kernel), "conv")
    add(f"dec.{last}.conv.bias", (1,), "vector")
    return r


def check_hparams(hp: MimiHParams, src: str) -> None:
    """Sizes the graph cannot honour are refused here, before ggml sees them."""
    ints = ["hidden", "upsample_stride", "upsample_kernel", "seanet_channels", "kernel_size", "last_kernel",
            "sample_rate", "compress", "dilation_base"]
    if hp.num_layers:
        ints += ["num_heads", "head_dim", "intermediate_size", "context"]
    ints += ["num_quantizers", "codebook_size", "codebook_dim"] if hp.input == "codes" else ["latent_dim"]
    for name in ints:
        v = getattr(hp, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidModelError(f"{src}: hyperparameter {name} = {v!r}; expected an integer >= 1")
    if hp.input not in ("codes", "latent"):
        raise InvalidModelError(f"{src}: input {hp.input!r}; expected 'codes' or 'latent'")
    for name in ("rope_theta", "norm_eps"):
        v = getattr(hp, name)
        if not math.isfinite(v) or v <= 0:
            raise InvalidModelError(f"{src}: hyperparameter {name} = {v!r}; expected a finite number > 0")
    for name in ("rope_interleaved", "gelu_tanh"):
        if getattr(hp, name) not in (0, 1):
            raise InvalidModelError(f"{src}: hyperparameter {name} = {getattr(hp, name)!r}; expected 0 or 1")
    if hp.num_layers and hp.head_dim % 2:
        raise InvalidModelError(f"{src}: head_dim = {hp.head_dim}; RoPE needs an even head width")
    if hp.upsample_kernel % hp.upsample_stride:
        raise InvalidModelError(
            f"{src}: the upsample's kernel {hp.upsample_kernel} is not a multiple of its stride {hp.upsample_stride}"
        )
    if hp.seanet_channels % 2**hp.n_blocks:
        raise InvalidModelError(
            f"{src}: {hp.seanet_channels} SEANet channels cannot be halved {hp.n_blocks} times (one per ratio)"
        )
    if hp.input == "codes" and not 1 <= hp.num_quantizers <= hp.file_quantizers:
        raise InvalidModelError(
            f"{src}: num_quantizers = {hp.num_quantizers}; the file has {hp.file_quantizers} codebooks (1 to "
            f"{hp.file_quantizers} can be used)"
        )


def divide_codebooks(weights: dict[str, Weight], hp: MimiHParams) -> None:
    """Codebooks stored as (embed_sum, cluster_usage) become embed_sum / max(usage, 1e-5), as transformers divides
    at every decode; a codebook without usage is taken as already divided."""
    for key in [k for k in weights if k.endswith(".usage")]:
        usage = weights.pop(key)
        prefix = key[: -len(".usage")]
        cb = weights[f"{prefix}.codebook"]
        divided = cb.f32() / np.maximum(usage.f32(), np.float32(USAGE_EPS))[:, None]
        weights[f"{prefix}.codebook"] = Weight(cb.role, cb.source, "F32", cb.shape, divided.astype(np.float32))


def stage_names(hp: MimiHParams) -> list[str]:
    """Stages in order: the input's (`quantizer` for codes, `latent` for latents), `upsample`, each transformer
    layer, the SEANet's first conv (`decoder.0`), each ratio's block (`decoder.{j}`: ELU, transposed conv,
    residual units) and the last conv (`decoder.{n+1}`, the waveform)."""
    first = "quantizer" if hp.input == "codes" else "latent"
    return ([first, "upsample"] + [f"transformer.{i}" for i in range(hp.num_layers)]
            + [f"decoder.{j}" for j in range(hp.n_blocks + 2)])


def stage_input_shape(hp: MimiHParams, stage: str, frames: int) -> tuple[int, int]:
    """(channels, T) of the input a stage takes for `frames` code frames."""
    if stage == "quantizer":
        return hp.num_quantizers, frames
    if stage == "latent":
        return hp.latent_dim, frames
    if stage == "upsample":
        return hp.hidden, frames
    steps = frames * hp.upsample_stride
    if stage.startswith("transformer."):
        return hp.hidden, steps
    j = int(stage.split(".")[1])
    if j == 0:
        return hp.hidden, steps
    if j <= hp.n_blocks:
        return hp.block_channels(j)[0], steps * math.prod(hp.ratios[: j - 1])
    return hp.num_filters, steps * math.prod(hp.ratios)


@dataclass(frozen=True)
class Mimi:
    """The family record (kzlab.arch.Arch)."""

    name: str = ARCH_NAME
    label: str = "Mimi decoder (Moshi, Sesame CSM, PocketTTS)"
    #: codec.cpp's `mimi`, a Hugging Face config's model_type `mimi`, CrispASR's `pocket-tts`, kzlab's own
    #: PocketTTS files (llama.cpp's mmproj is a `clip` file: its layout map names the family)
    architectures: tuple[str, ...] = ("mimi", "pocket-tts")
    graph_module: str = "kzlab.arch.mimi.graph"
    files_module: str = "kzlab.arch.mimi.files"
    hparams_type: type = MimiHParams
    #: no upstream chunking: a chunk of 300 frames with 25 before it (the transformer's window is 125 frames of
    #: kyutai/mimi's steps, 15.6 of PocketTTS's: 25 frames cover either's)
    chunk_size: int = 300
    left_context: int = 25
    right_context: int = 0
    #: every layer reads only the past (causal convs and transposed convs, a causal windowed transformer)
    causal: bool = True
    stage_aliases: dict[str, str] = field(default_factory=lambda: {"codes": "quantizer", "latents": "latent"})
    fused_nodes: bool = False
    not_applicable: dict[str, str] = field(default_factory=lambda: {
        "snake": "Mimi's activation is ELU, not SnakeBeta",
        "resunit": "Mimi has no BigVGAN residual units",
        "unitconv": "Mimi has no BigVGAN residual units",
        "istft": "Mimi's last conv gives the waveform itself: there is no inverse STFT",
        "dwconv": "Mimi's one depthwise op is the upsample's transposed conv (per-tap products)",
        "dwmlp": "Mimi has no ConvNeXt blocks",
        "normconv": "Mimi has no GroupNorm + conv blocks",
        "gelu": "Mimi's GELU form is the model's own (exact erf in kyutai/mimi, tanh in PocketTTS), read from the "
                "file or its layout map",
    })

    def detect(self, architecture: str | None, tensor_names: Sequence[str]) -> bool:
        return architecture in self.architectures

    def hparams_from(self, shapes, meta, source, quirks=None, notes=None) -> MimiHParams:
        try:
            return hparams_from(shapes, meta, source, quirks, notes)
        except (IndexError, ValueError, TypeError) as e:
            raise InvalidModelError(f"{source}: tensor shapes or metadata do not describe a decoder: {e}") from None

    def check(self, hp: MimiHParams, meta: dict[str, Any], roles_present: set[str], source: str) -> None:
        check_hparams(hp, source)

    def roles(self, hp: MimiHParams) -> list[Role]:
        return decoder_roles(hp)

    def finish_weights(self, weights: dict[str, Any], hp: MimiHParams) -> None:
        divide_codebooks(weights, hp)

    def stages(self, hp: MimiHParams) -> list[Stage]:
        return [Stage(n, n.split(".")[0], i) for i, n in enumerate(stage_names(hp))]

    def stage_input_shape(self, hp: MimiHParams, stage: str, frames: int) -> tuple[int, int]:
        return stage_input_shape(hp, stage, frames)

    def describe(self, hp: MimiHParams) -> list[tuple[str, str]]:
        if hp.input == "codes":
            cap = (f" (num_quantizers={hp.num_quantizers}: at most {hp.num_quantizers} used)"
                   if hp.num_quantizers != hp.file_quantizers else "")
            first = ("quantizer", f"{hp.file_quantizers} codebooks ({hp.num_semantic} semantic){cap} of "
                     f"{hp.codebook_size} x {hp.codebook_dim} -> {hp.hidden}; codes [n, T] decode the first n, "
                     f"n from 1 to {hp.num_quantizers}")
        else:
            first = ("latent", f"{hp.latent_dim}-d latents, denormalised, -> {hp.hidden}")
        tfm = ("transformer", f"{hp.num_layers} layers, width {hp.hidden}, {hp.num_heads} heads of {hp.head_dim}, "
               f"ffn {hp.intermediate_size}, window {hp.context} steps, RoPE "
               f"{'interleaved' if hp.rope_interleaved else 'rotate-half'} base {hp.rope_theta:g}, GELU "
               f"{'tanh' if hp.gelu_tanh else 'erf'}, LayerNorm eps {hp.norm_eps:g}")
        return [
            first,
            ("upsample", f"depthwise transposed conv, stride {hp.upsample_stride}, kernel {hp.upsample_kernel}"),
            tfm,
            ("seanet", f"{hp.seanet_channels} channels, ratios {list(hp.ratios)}, {hp.residual_layers} residual "
             f"unit(s) per ratio, ELU, {hp.num_filters} -> 1"),
            ("output", f"{hp.samples_per_frame} samples per frame at {hp.sample_rate} Hz"),
        ]

    def summary_stages(self, hp: MimiHParams) -> list[str]:
        return ["upsample", "decoder.0"] + [f"decoder.{j}" for j in range(1, hp.n_blocks + 1)]

    def samples_per_frame(self, hp: MimiHParams) -> int:
        return hp.samples_per_frame

    def keeps_f16_in_q8_0(self, role: str) -> bool:
        return False

    def chunk_split(self, hp: MimiHParams) -> None:
        return None

    def custom_flops(self, name: str, out: Any, srcs: Sequence[Any]) -> int | None:
        return None

    def custom_label(self, name: str, srcs: Sequence[Any]) -> str | None:
        return None


ARCH = Mimi()
