"""Mimi's layout inference: a map for a Mimi decoder file whose tensors no built-in map names.

The files people have hold more than the decoder: codec.cpp's holds the encoder (its SEANet, transformer and
downsample have the decoder's shapes, mirrored), second copies of the decoder's transformer and residual units,
the codebooks both as sums with usage counts and divided; llama.cpp's PocketTTS mmproj holds a flow LM and a
speaker encoder whose transformer has the decoder's width. Words cannot be relied on to tell those apart (a
converter's abbreviations, or none), so the decoder is found as a graph of sizes, from the waveform back, each
part chosen among same-shaped rivals by how near its name sits to the parts already found (the common prefix of
their tokens: the decoder's tensors share one, the encoder's another):

1. the SEANet: the conv to one channel [1, C, k] (the waveform); transposed convs [2c, c, 2r] that halve the
   channels towards it, one per ratio; each one's residual units (a conv [c/m, c, k > 1] and a 1x1 conv
   [c, c/m, 1] nearest it); the first conv [C0, H, k] into the widest block: H is the transformer's width;
2. the upsample: a depthwise transposed conv [H, 1, 2s], or one stored dense [H, H, 2s] with zeros off its
   diagonal (read back through the `diagonal` transform; a dense kernel with anything off its diagonal is a
   real conv: codec.cpp's downsample has the same shape);
3. the transformer: numbered groups of matrices of width H that make a layer (q, k, v [D, H], o [H, D], up
   [I, H], down [H, I]; or q, k and v stacked in one [3D, H], split in PyTorch's order); groups sharing a name
   pattern make a stack; the stack nearest the decoder's other parts is the decoder's, a stack of identical
   values elsewhere a copy, one of other values as near a reason to refuse;
4. the input: codebooks (numbered matrices [K, d] with an unnumbered projection [H, d] per branch, optional
   usage counts [K]; the semantic branch the one whose count the metadata states), or PocketTTS's latents (an
   unnumbered projection [H, L] and two unnumbered vectors [L] that are no matrix's bias: the one all > 0 is
   the std);
5. the vectors: each conv's bias is the vector of its length whose name differs least from the conv's (which
   also teaches the file's own words for weight and bias when the vocabulary knows neither); each layer's six
   [H] vectors (two LayerNorms' weights and biases, two layer scales) go to roles by the solver every family
   shares (kzlab.formats.infer): a norm's weight and bias are one module, a scale stands alone; weight/bias
   words, side words, the matrices a name shares most with, or the numbers (`ln1` before `ln2`: attention
   comes first) decide the rest.

Copies of one tensor (identical values) are one choice, and the proposal says which was taken. Where shapes,
values and the name structure leave a choice (q, k, v and o of one layer have one shape and nothing but a word
tells them apart), inference refuses and names the tensors. What no tensor says (heads, RoPE base, window,
epsilon, RoPE's pairing, GELU's form) comes from the metadata: the standard keys, else the runtime the metadata
marks (codec.cpp's `codec.*`, llama.cpp's `clip.gen.audio.projector_type`, CrispASR's `pocket_tts.*`: their
built-in maps' `[hparams]`, what those runtimes hard-code), else the proposal's notes say what it assumed.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.arch.mimi.spec import ARCH, GELU_KEYS, MimiHParams, _meta, decoder_roles
from kzlab.errors import LayoutError
from kzlab.formats.infer import (
    _T,
    Assignment,
    NotThisFamily,
    Proposal,
    Score,
    _ordinal,
    _refuse,
    _solve,
    _Solver,
    _suffixes,
    _word,
    apply_overrides,
    has_word,
    heads_from_metadata,
    lcp,
    natural_key,
    proposal_of,
    sides,
)
from kzlab.formats.layout import get_layout
from kzlab.formats.reader import RawFile
from kzlab.model.model import to_f32

_DIGITS = re.compile(r"\d+")


# --- names ---------------------------------------------------------------------------------------------
def _num_pos(t: _T) -> int | None:
    """The index of the first token that holds a number (`0`, `l0`, `blk3`): a layer's or a codebook's index."""
    for i, x in enumerate(t.toks):
        if _DIGITS.search(x):
            return i
    return None


def _number(tok: str) -> int:
    return int(_DIGITS.search(tok).group())  # type: ignore[union-attr]


def _pattern(toks: Iterable[str]) -> tuple[str, ...]:
    """The tokens with their numbers blanked: the name a family of numbered tensors shares."""
    return tuple(_DIGITS.sub("#", x) for x in toks)


def _near(t: _T, anchors: Iterable[_T]) -> int:
    """How near a tensor's name sits to some tensors already placed: the longest common token prefix."""
    return max((lcp(t.toks, a.toks) for a in anchors), default=0)


def _sorted(ts: Iterable[_T]) -> list[_T]:
    return sorted(ts, key=lambda t: natural_key(t.name))


# --- state --------------------------------------------------------------------------------------------
@dataclass
class _Ctx:
    """The solver's state with what Mimi's inference adds: canonical shapes (after a transform), transforms,
    notes, and digests of tensor values (to tell copies from rivals)."""

    s: _Solver
    notes: list[str] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    transforms: dict[str, tuple[str, str]] = field(default_factory=dict)
    digests: dict[str, bytes] = field(default_factory=dict)
    #: tensors a part of the decoder was chosen over because they are copies of it: tensor -> the one taken
    copies: dict[str, str] = field(default_factory=dict)
    #: words no vocabulary knows that the file uses for weight and bias, learnt from the convs: word -> kind
    learned: dict[str, str] = field(default_factory=dict)
    diagonal: dict[str, bool] = field(default_factory=dict)

    @property
    def src(self) -> str:
        return self.s.src

    def stem(self, t: _T) -> tuple[str, ...]:
        """A tensor's module name: its tokens without weight/bias words, the vocabulary's or the file's own."""
        return tuple(x for x in t.stem if x not in self.learned)

    def words(self, toks: Iterable[str]) -> tuple[str, ...]:
        """Tokens with the file's own weight/bias words read as the vocabulary's."""
        return tuple(self.learned.get(x, x) for x in toks)

    def free(self) -> list[_T]:
        return list(self.s.free.values())

    def take(self, role: str, t: _T, how: str, shape: tuple[int, ...] | None = None) -> None:
        self.s.take(role, t, how)
        self.shapes[role] = tuple(shape if shape is not None else t.shape)

    def values(self, t: _T) -> np.ndarray:
        r = self.s.raw.tensors[t.name]
        return to_f32(r.type, r.data, r.shape)

    def digest(self, t: _T) -> bytes:
        d = self.digests.get(t.name)
        if d is None:
            r = self.s.raw.tensors[t.name]
            h = hashlib.blake2b(f"{r.type}{tuple(r.shape)}".encode(), digest_size=16)
            h.update(np.ascontiguousarray(r.data).view(np.uint8).reshape(-1).data)
            d = self.digests[t.name] = h.digest()
        return d

    def is_diagonal(self, t: _T) -> bool:
        """Whether a kernel [C, C, K] is zero off its diagonal (a depthwise kernel stored dense)."""
        if t.name not in self.diagonal:
            ok = len(t.shape) == 3 and t.shape[0] == t.shape[1]
            if ok:
                x = self.values(t)
                idx = np.arange(x.shape[0])
                off = np.array(x, copy=True)
                off[idx, idx, :] = 0.0
                ok = bool(np.any(x[idx, idx, :])) and not np.any(off)
            self.diagonal[t.name] = ok
        return self.diagonal[t.name]

    def same(self, ts: Sequence[_T]) -> bool:
        """Whether the tensors are copies of one tensor (type, shape and bytes)."""
        return len({self.digest(t) for t in ts}) == 1

    def pick(self, cands: Sequence[_T], anchors: Sequence[_T], what: str) -> tuple[_T, str]:
        """The candidate whose name sits nearest the decoder's parts already found; copies count as one.
        `how` is "shape" when no other tensor had the shape, else "name"."""
        if len(cands) == 1:
            return cands[0], "shape"
        score = {t.name: _near(t, anchors) for t in cands}
        best = max(score.values())
        top = _sorted(t for t in cands if score[t.name] == best)
        if len(top) > 1:
            if not self.same(top):
                raise _refuse(f"{self.src}: {what}: several tensors fit and none sits nearer the decoder's other "
                              "tensors by name", [t.name for t in top])
            for t in top[1:]:
                self.copies[t.name] = top[0].name
        return top[0], "name"


# --- 1. the SEANet ------------------------------------------------------------------------------------------
def _is_conv(t: _T) -> bool:
    return len(t.shape) == 3


@dataclass
class _Block:
    convt: _T
    how: str
    units: list[tuple[_T, _T, str]]


@dataclass
class _Seanet:
    wave: _T
    blocks: list[_Block]  # decoder order: the widest first
    first: _T
    first_how: str

    def tensors(self) -> list[_T]:
        out = [self.wave, self.first]
        for b in self.blocks:
            out.append(b.convt)
            out += [x for u in b.units for x in u[:2]]
        return out


def _seanet(c: _Ctx) -> _Seanet:
    """The SEANet from the waveform conv back: every conv to one channel is tried; the decoder is the one that
    builds a chain of halving transposed convs and a first conv; two that do, unless copies, are refused."""
    waves = _sorted(t for t in c.free() if _is_conv(t) and t.shape[0] == 1 and t.shape[1] > 1 and t.shape[2] > 1)
    if not waves:
        raise NotThisFamily(f"{c.src}: not a Mimi decoder as far as the shapes tell: no conv to one channel (the "
                            "waveform) [1, C, k]")
    built: list[_Seanet] = []
    first_error: LayoutError | None = None
    for w in waves:
        copies = dict(c.copies)
        try:
            built.append(_chain(c, w))
        except LayoutError as e:
            first_error = first_error or e
            c.copies = copies
    if not built:
        assert first_error is not None
        raise first_error
    if len(built) > 1:
        if not all(len(b.tensors()) == len(built[0].tensors()) and all(
                c.same([x, y]) for x, y in zip(b.tensors(), built[0].tensors(), strict=True)) for b in built):
            raise _refuse(f"{c.src}: several convs to one channel each end a SEANet decoder",
                          [b.wave.name for b in built])
        for b in built[1:]:
            for x, y in zip(b.tensors(), built[0].tensors(), strict=True):
                c.copies[x.name] = y.name
    return built[0]


def _chain(c: _Ctx, wave: _T) -> _Seanet:
    used = {wave.name}
    blocks: list[_Block] = []
    cout = wave.shape[1]
    floor: int | None = None  # the decoder's tensors share at least the prefix the first block shares with the wave
    while True:
        cands = [t for t in c.free() if t.name not in used and _is_conv(t) and t.shape[0] == 2 * cout
                 and t.shape[1] == cout and t.shape[2] >= 2 and t.shape[2] % 2 == 0]
        if floor is not None:
            cands = [t for t in cands if lcp(t.toks, wave.toks) >= floor]
        if not cands:
            break
        anchors = [wave] + [b.convt for b in blocks]
        t, how = c.pick(_sorted(cands), anchors, f"the transposed conv of {2 * cout} -> {cout} channels")
        if floor is None:
            floor = lcp(t.toks, wave.toks)
        used.add(t.name)
        units = _units(c, t, used, wave, floor)
        blocks.append(_Block(t, how, units))
        cout = t.shape[0]
    if not blocks:
        raise NotThisFamily(f"{c.src}: not a Mimi decoder as far as the shapes tell: no transposed conv [2C, C, 2r] "
                            f"into the waveform conv '{wave.name}' [1, {wave.shape[1]}, {wave.shape[2]}]")
    assert floor is not None
    cands = [t for t in c.free() if t.name not in used and _is_conv(t) and t.shape[0] == cout and t.shape[1] > 1
             and lcp(t.toks, wave.toks) >= floor and not c.is_diagonal(t)]
    if not cands:
        raise NotThisFamily(f"{c.src}: no first conv [{cout}, H, k] into the SEANet's widest block "
                            f"'{blocks[-1].convt.name}'")
    first, how = c.pick(_sorted(cands), [wave, blocks[-1].convt], f"the SEANet's first conv [{cout}, H, k]")
    return _Seanet(wave, blocks[::-1], first, how)


def _units(c: _Ctx, convt: _T, used: set[str], wave: _T, floor: int) -> list[tuple[_T, _T, str]]:
    """A block's residual units: each a conv [c/m, c, k > 1] and a 1x1 conv [c, c/m, 1], the ones whose names
    sit nearest the block's transposed conv, paired by name and ordered by the numbers in their names."""
    co = convt.shape[1]

    def near(ts: list[_T]) -> list[_T]:
        ts = [t for t in ts if t.name not in used and lcp(t.toks, wave.toks) >= floor]
        if not ts:
            return []
        best = max(lcp(t.toks, convt.toks) for t in ts)
        return _sorted(t for t in ts if lcp(t.toks, convt.toks) == best)

    c1 = near([t for t in c.free() if _is_conv(t) and t.shape[1] == co and t.shape[0] <= co and co % t.shape[0] == 0
               and t.shape[2] > 1 and not c.is_diagonal(t)])
    c2 = near([t for t in c.free() if _is_conv(t) and t.shape[0] == co and t.shape[2] == 1 and t.shape[1] <= co
               and co % t.shape[1] == 0])
    if len(c1) != len(c2):
        raise _refuse(f"{c.src}: the block of '{convt.name}': {len(c1)} residual conv(s) [c/m, {co}, k] but "
                      f"{len(c2)} 1x1 conv(s) [{co}, c/m, 1] beside it", [t.name for t in c1 + c2])
    if not c1:
        return []
    if len(c1) == 1:
        if c2[0].shape[1] != c1[0].shape[0]:
            raise _refuse(f"{c.src}: a residual unit's convs do not fit each other", [c1[0].name, c2[0].name])
        used.update((c1[0].name, c2[0].name))
        return [(c1[0], c2[0], "shape" if _alone(c, c1[0]) and _alone(c, c2[0]) else "name")]
    pairs = []
    for a in c1:
        sc = [lcp(a.toks, b.toks) for b in c2]
        top = [b for b, v in zip(c2, sc, strict=True) if v == max(sc)]
        if len(top) != 1:
            raise _refuse(f"{c.src}: residual units of '{convt.name}': cannot tell which convs belong together",
                          [a.name] + [b.name for b in top])
        pairs.append((a, top[0], "order"))
    if len({b.name for _, b, _ in pairs}) != len(pairs):
        raise _refuse(f"{c.src}: residual units of '{convt.name}': cannot tell which convs belong together",
                      [t.name for t in c1 + c2])
    for a, b, _ in pairs:
        used.update((a.name, b.name))
    return pairs


def _alone(c: _Ctx, t: _T) -> bool:
    """Whether no other tensor of the file has this tensor's shape."""
    return sum(1 for x in c.s.all.values() if x.shape == t.shape) == 1


# --- 2. the upsample ----------------------------------------------------------------------------------------
def _upsample(c: _Ctx, H: int, anchors: list[_T]) -> None:
    """A depthwise transposed conv [H, 1, 2s], or one stored dense [H, H, 2s] that is zero off its diagonal."""
    dw = [t for t in c.free() if _is_conv(t) and t.shape[:2] == (H, 1) and t.shape[2] >= 2 and t.shape[2] % 2 == 0]
    dense = [t for t in c.free() if _is_conv(t) and t.shape[:2] == (H, H) and t.shape[2] >= 2 and t.shape[2] % 2 == 0]
    diag = [t for t in dense if c.is_diagonal(t)]
    cands = _sorted(dw + diag)
    if not cands:
        shown = ", ".join(f"'{t.name}'" for t in dense[:8])
        raise NotThisFamily(f"{c.src}: no upsample of the decoder's width {H}: a depthwise transposed conv [{H}, 1, "
                            f"2s], or one stored dense [{H}, {H}, 2s] with zeros off its diagonal"
                            + (f" (these dense kernels of that shape are not: {shown})" if dense else ""))
    t, how = c.pick(cands, anchors, f"the upsample [{H}, 1, 2s]")
    if t in diag:
        c.transforms[t.name] = ("diagonal", "")
        rivals = [x.name for x in dense if x is not t]
        c.notes.append(f"the upsample '{t.name}' is stored dense [{H}, {H}, {t.shape[2]}] with zeros off its "
                       "diagonal: read back from its diagonal" + (
                           f" (not {', '.join(rivals[:3])}: of that shape, but a real conv)" if rivals else ""))
        c.take("upsample.dwconv.weight", t, "shape" if len(cands) == 1 else how, (H, 1, t.shape[2]))
    else:
        c.take("upsample.dwconv.weight", t, how)


# --- 3. the transformer -------------------------------------------------------------------------------------
_SEPARATE = ["attn_q", "attn_k", "attn_v", "attn_o", "ffn_up", "ffn_down"]
_STACKED = ["attn_qkv", "attn_o", "ffn_up", "ffn_down"]
_KIND = {"attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_o": "o", "ffn_up": "up", "ffn_down": "down"}


@dataclass
class _Layer:
    number: int
    key: tuple[str, ...]  # the tokens up to and with the layer's number
    mats: list[_T]
    form: str  # "separate" (q, k, v apart) or "stacked" (one [3D, H])
    H: int
    D: int
    I: int  # noqa: E741


def _layer_form(ts: list[_T], H: int) -> tuple[str, int, int] | None:
    """(form, D, I) when the matrices make one transformer layer of width H, else None."""
    ms = [t.mat() for t in ts]
    if len(ms) == 6:
        for q, k, v, o, up, down in itertools.permutations(ms):
            if q == k == v and q[1] == H and o == (H, q[0]) and up[1] == H and down == (H, up[0]):
                return "separate", q[0], up[0]
    if len(ms) == 4:
        for qkv, o, up, down in itertools.permutations(ms):
            if qkv[1] == H and qkv[0] % 3 == 0 and o == (H, qkv[0] // 3) and up[1] == H and down == (H, up[0]):
                return "stacked", qkv[0] // 3, up[0]
    return None


def _stacks(c: _Ctx, H: int) -> dict[tuple[str, ...], list[_Layer]]:
    """Every stack of transformer layers of width H: matrices grouped by their name up to its first number,
    the groups that make a layer, the layers whose names share one pattern."""
    groups: dict[tuple[str, ...], list[_T]] = defaultdict(list)
    for t in c.free():
        m = t.mat()
        p = _num_pos(t)
        if m is not None and H in m and p is not None:
            groups[t.toks[: p + 1]].append(t)
    stacks: dict[tuple[str, ...], list[_Layer]] = defaultdict(list)
    for key, ts in groups.items():
        form = _layer_form(ts, H)
        if form is not None:
            stacks[_pattern(key)].append(_Layer(_number(key[-1]), key, _sorted(ts), form[0], H, form[1], form[2]))
    out = {}
    for k, layers in stacks.items():
        layers.sort(key=lambda x: x.number)
        if len({x.number for x in layers}) == len(layers) and len({(x.form, x.D, x.I) for x in layers}) == 1:
            out[k] = layers
    return out


def _transformer(c: _Ctx, H: int, anchors: list[_T]) -> tuple[list[_Layer], set[str]]:
    """The decoder's stack: of the stacks of width H, the one whose names sit nearest the decoder's parts found
    so far; a stack of the same values elsewhere is a copy, one of other values as near is refused. Returns the
    decoder's layers and the names of every stack's matrices (not codebooks, whatever their shapes)."""
    stacks = _stacks(c, H)
    if not stacks:
        raise NotThisFamily(f"{c.src}: no transformer layer of the decoder's width {H} (numbered groups of q, k, v "
                            f"[D, {H}], o [{H}, D] and MLP [I, {H}], [{H}, I] matrices)")
    near = {k: max(_near(t, anchors) for x in v for t in x.mats) for k, v in stacks.items()}
    best = max(near.values())
    top = sorted((k for k in stacks if near[k] == best), key=lambda k: natural_key(stacks[k][0].mats[0].name))
    chosen = stacks[top[0]]

    def values(layers: list[_Layer]) -> list[list[bytes]]:
        return [sorted(c.digest(t) for t in x.mats) for x in layers]

    mine = values(chosen)
    if len(top) > 1 and any(values(stacks[k]) != mine for k in top[1:]):
        raise _refuse(f"{c.src}: several stacks of transformer layers of width {H} fit and none sits nearer the "
                      "decoder's other tensors by name: cannot tell which is the decoder's",
                      [stacks[k][0].mats[0].name for k in top])
    others = [k for k in stacks if k != top[0]]
    same = [stacks[k][0].mats[0].name for k in others if values(stacks[k]) == mine]
    other = [stacks[k][0].mats[0].name for k in others if values(stacks[k]) != mine]
    if same:
        c.notes.append(f"the decoder's transformer (layer 0 as '{chosen[0].mats[0].name}'...) is also stored with "
                       f"the same values as {', '.join(repr(n) + '...' for n in same)}: a copy, not used")
    if other:
        shown = ", ".join(repr(n) + "..." for n in other)
        c.notes.append(f"transformer layers of width {H} with other values ({shown}) sit apart from the "
                       "decoder's tensors by name: another part's, not used")
    for i, layer in enumerate(chosen):
        _layer_mats(c, i, layer)
    return chosen, {t.name for v in stacks.values() for x in v for t in x.mats}


def _layer_mats(c: _Ctx, i: int, layer: _Layer) -> None:
    """One layer's matrices to roles: shapes first, then names that sit together, role and side words, the
    numbers in the names (`fc1` before `fc2`); four attention matrices of one shape and no word apart are
    refused, named."""
    group = layer.mats
    roles = _SEPARATE if layer.form == "separate" else _STACKED
    suffix = _suffixes(group)
    mat = {t.name: t.mat() for t in group}
    H, D, I_ = layer.H, layer.D, layer.I
    shape_of = {"attn_q": (D, H), "attn_k": (D, H), "attn_v": (D, H), "attn_o": (H, D), "ffn_up": (I_, H),
                "ffn_down": (H, I_), "attn_qkv": (3 * D, H)}
    rivals = set(_KIND.values())
    unary: dict[tuple[str, str], float] = {}
    for r in roles:
        mine, other = ("ffn", "attn") if r.startswith("ffn") else ("attn", "ffn")
        for t in group:
            u = 0.5 * (has_word(mine, suffix[t.name]) - has_word(other, suffix[t.name]))
            if r in _KIND:
                u += _word(_KIND[r], rivals, suffix[t.name])
            unary[(r, t.name)] = u
    pairs = list(itertools.combinations([r for r in roles if r.startswith("attn")], 2)) + [("ffn_up", "ffn_down")]

    def fits(r: str, t: _T, _a: dict[str, _T]) -> bool:
        return mat[t.name] == shape_of[r]

    def score(a: dict[str, _T]) -> Score:
        t1 = sum(lcp(a[x].stem, a[y].stem) for x, y in pairs)
        t2 = sum(unary[(r, t.name)] for r, t in a.items())
        ou, od = _ordinal(suffix[a["ffn_up"].name]), _ordinal(suffix[a["ffn_down"].name])
        t3 = 0 if ou is None or od is None or ou == od else (1 if ou < od else -1)
        return (t1, t2, t3)

    got = _solve(group, roles, lambda a: True, score, f"{c.src}: transformer layer {i} ('{'.'.join(layer.key)}')",
                 fits)
    for r, (t, how) in got.items():
        if r == "attn_qkv":
            c.s.take(f"tfm.blk.{i}.attn_{{k}}.weight", t, how)
            for w in "qkv":
                c.shapes[f"tfm.blk.{i}.attn_{w}.weight"] = (D, H)
            c.transforms[t.name] = ("split", "q,k,v")
        else:
            c.take(f"tfm.blk.{i}.{r}.weight", t, how, mat[t.name])
    if layer.form == "stacked" and i == 0:
        c.notes.append("q, k and v stacked in one matrix [3D, H] are taken in that order (PyTorch's in_proj): the "
                       "shapes cannot tell")


_LAYER_VECS = ["attn_norm.weight", "attn_norm.bias", "attn_scale", "ffn_norm.weight", "ffn_norm.bias", "ffn_scale"]


def _layer_vecs(c: _Ctx, i: int, layer: _Layer) -> None:
    """A layer's six [H] vectors: a norm's weight and bias share a name, a scale stands alone; weight/bias and
    norm/scale words, the side its name points to (words, or the matrices it shares more of its name with), and
    the numbers in the names (attention's before the MLP's) decide."""
    p = f"tfm.blk.{i}."
    H, n = layer.H, len(layer.key)
    vecs = _sorted(t for t in c.free() if t.shape == (H,) and t.toks[:n] == layer.key)
    roles = [p + r for r in _LAYER_VECS]
    if len(vecs) != len(roles):
        raise _refuse(f"{c.src}: transformer layer {i} ('{'.'.join(layer.key)}'): expected 6 vectors [{H}] (two "
                      f"norms' weights and biases, two layer scales), found {len(vecs)}", [t.name for t in vecs])
    side_mats = {
        "attn": [c.s.all[a.tensor] for r, a in c.s.out.items() if r.startswith(p + "attn_")],
        "ffn": [c.s.all[a.tensor] for r, a in c.s.out.items() if r.startswith(p + "ffn_")],
    }
    suffix = _suffixes(vecs)
    number = {t.name: _ordinal(suffix[t.name]) for t in vecs}
    unary: dict[tuple[str, str], tuple[float, float]] = {}
    for r in roles:
        mine, other = ("attn", "ffn") if r.startswith(p + "attn") else ("ffn", "attn")
        for t in vecs:
            u1 = max((lcp(c.stem(t), c.stem(m)) for m in side_mats[mine]), default=0)
            toks = c.words(suffix[t.name])
            if r.endswith("scale"):
                u2 = _word("scale", {"norm", "scale"}, toks)
            else:
                u2 = _word("norm", {"norm", "scale"}, toks)
                u2 += _word("bias" if r.endswith("bias") else "weight", {"weight", "bias"}, toks)
            said = sides(toks)
            u2 += 2 * (mine in said) - 2 * (other in said)
            unary[(r, t.name)] = (u1, u2)
    pairs = [(p + "attn_norm.weight", p + "attn_norm.bias"), (p + "ffn_norm.weight", p + "ffn_norm.bias")]
    seq = [(roles[0], roles[3]), (roles[1], roles[4]), (roles[2], roles[5])]

    def score(a: dict[str, _T]) -> Score:
        t1 = sum(unary[(r, t.name)][0] for r, t in a.items()) + 8 * sum(_one_module(c, a[x], a[y]) for x, y in pairs)
        t2 = sum(unary[(r, t.name)][1] for r, t in a.items())
        t3 = 0
        for x, y in seq:
            ox, oy = number[a[x].name], number[a[y].name]
            if ox is not None and oy is not None and ox != oy:
                t3 += 1 if ox < oy else -1
        return (t1, t2, t3)

    what = f"{c.src}: transformer layer {i} ('{'.'.join(layer.key)}'): its norms and scales"
    for r, (t, how) in _solve(vecs, roles, lambda a: True, score, what).items():
        c.take(r, t, how)


def _one_module(c: _Ctx, x: _T, y: _T) -> bool:
    """Whether two tensors are one module's (a norm's weight and bias): their names without weight/bias words
    are equal, or differ in their last token only, a word without a number (`inln.w` / `inln.b` whatever the
    words)."""
    if c.stem(x) == c.stem(y):
        return True
    return (len(x.toks) == len(y.toks) and x.toks[:-1] == y.toks[:-1]
            and not _DIGITS.search(x.toks[-1]) and not _DIGITS.search(y.toks[-1]))


# --- 4. the input -------------------------------------------------------------------------------------------
@dataclass
class _Family:
    """Numbered codebooks of one name pattern, in index order, with their usage counts when the file has them."""

    books: list[_T]
    usage: list[_T | None]

    @property
    def with_usage(self) -> bool:
        return all(u is not None for u in self.usage)


def _index_pos(ts: list[_T]) -> int:
    """The token that numbers a family: the first whose number differs between members (the first number for
    a family of one)."""
    first = _num_pos(ts[0])
    assert first is not None
    for i in range(first, len(ts[0].toks)):
        nums = {_number(t.toks[i]) if _DIGITS.search(t.toks[i]) else None for t in ts}
        if len(nums) > 1:
            return i
    return first


def _families(ts: list[_T]) -> list[_Family] | None:
    """The codebook families among one projection's numbered matrices, or None when they are not codebooks
    (matrices of several shapes or name patterns of different sizes, indices not consecutive)."""
    fams: dict[tuple[str, ...], list[_T]] = defaultdict(list)
    for t in ts:
        fams[_pattern(t.toks)].append(t)
    out = []
    for members in fams.values():
        pos = _index_pos(members)
        members.sort(key=lambda t: _number(t.toks[pos]))
        idx = [_number(t.toks[pos]) for t in members]
        if idx != list(range(idx[0], idx[0] + len(idx))):
            return None
        out.append(_Family(members, [None] * len(members)))
    if len({f.books[0].shape for f in out}) != 1 or len({len(f.books) for f in out}) != 1:
        return None
    return out


def _codes(c: _Ctx, H: int, exclude: set[str]) -> bool:
    """Codebooks: numbered matrices [K, d], each with the unnumbered projection [H, d] its name sits nearest;
    one projection per branch (semantic, acoustic). Usage counts [K] are the vectors whose names share the most
    with a codebook's (its index included). Codebooks stored twice (sums with counts, and divided) are one
    choice when their values agree. False when the file has no such quantizer."""
    meta = c.s.raw.metadata
    free = [t for t in c.free() if t.name not in exclude]
    projs = _sorted(t for t in free if (m := t.mat()) is not None and m[0] == H and _num_pos(t) is None)
    owned: dict[str, list[_T]] = defaultdict(list)
    for t in free:
        if len(t.shape) != 2 or _num_pos(t) is None or t in projs:
            continue
        ps = [p for p in projs if p.mat()[1] == t.shape[1]]  # type: ignore[index]
        if not ps:
            continue
        sc = {p.name: lcp(t.toks, p.toks) for p in ps}
        top = [p for p in ps if sc[p.name] == max(sc.values())]
        if len(top) == 1:
            owned[top[0].name].append(t)
    branches: list[tuple[_T, list[_Family]]] = []
    for p in projs:
        fams = _families(owned[p.name]) if owned[p.name] else None
        if fams:
            branches.append((p, fams))
    if not branches:
        return False
    if len({f.books[0].shape for _, fams in branches for f in fams}) != 1:
        raise _refuse(f"{c.src}: codebooks of several shapes under the quantizer's projections",
                      [fams[0].books[0].name for _, fams in branches])
    if len(branches) > 2:
        raise _refuse(f"{c.src}: {len(branches)} codebook branches with a projection each; Mimi has a semantic and "
                      "an acoustic one", [p.name for p, _ in branches])
    K = branches[0][1][0].books[0].shape[0]
    # usage counts: each [K] vector goes to the codebook whose name shares the most with it, index included
    members = [(f, j, b) for _, fams in branches for f in fams for j, b in enumerate(f.books)]
    for v in c.free():
        if v.shape != (K,) or _num_pos(v) is None:
            continue
        sc = [lcp(v.toks, b.toks) for _, _, b in members]
        best = max(sc)
        top = [m for m, s in zip(members, sc, strict=True) if s == best]
        f, j, b = top[0]
        if len(top) == 1 and best > _index_pos(f.books) and f.usage[j] is None:
            f.usage[j] = v
    chosen: list[tuple[_T, _Family]] = []
    for p, fams in branches:
        chosen.append((p, _one_family(c, fams)))
    sem, aco = _semantic(c, chosen, meta)
    for branch, (p, f) in (("semantic", sem), ("acoustic", aco)) if aco is not None else (("semantic", sem),):
        how = "shape" if len(chosen) == 1 else "name"
        c.take(f"vq.{branch}.output_proj.weight", p, how, p.mat())
        for i, b in enumerate(f.books):
            c.take(f"vq.{branch}.{i}.codebook", b, "order" if len(f.books) > 1 else how)
            if f.with_usage:
                c.take(f"vq.{branch}.{i}.usage", f.usage[i], "name")  # type: ignore[arg-type]
    return True


def _one_family(c: _Ctx, fams: list[_Family]) -> _Family:
    """Of a branch's codebook families (one name pattern each), the one to read: the sums with their usage
    counts when the file has them, the others then checked to be the same codebooks (divided, or copied)."""
    for f in fams:
        if any(u is not None for u in f.usage) and not f.with_usage:
            raise _refuse(f"{c.src}: usage counts for some codebooks of a family only",
                          [b.name for b, u in zip(f.books, f.usage, strict=True) if u is None][:4])
    fams = sorted(fams, key=lambda f: (not f.with_usage, natural_key(f.books[0].name)))
    main = fams[0]
    for f in fams[1:]:
        if f.with_usage or not _same_codebooks(c, main, f):
            raise _refuse(f"{c.src}: several families of codebooks of one shape under one projection, with other "
                          "values: cannot tell which is the decoder's", [main.books[0].name, f.books[0].name])
        c.notes.append(f"the codebooks '{main.books[0].name}'... are also stored as '{f.books[0].name}'..."
                       + (" (divided by their usage counts)" if main.with_usage else "")
                       + ": the same values, not used")
    return main


def _same_codebooks(c: _Ctx, main: _Family, other: _Family) -> bool:
    for b, u, o in zip(main.books, main.usage, other.books, strict=True):
        x = c.values(b).astype(np.float64)
        if u is not None:
            x = x / np.maximum(c.values(u).astype(np.float64), 1e-5)[:, None]
        y = c.values(o).astype(np.float64)
        if not np.allclose(x, y, rtol=2e-3, atol=2e-3 * float(np.max(np.abs(x), initial=0.0))):
            return False
    return True


def _semantic(
    c: _Ctx, branches: list[tuple[_T, _Family]], meta: dict[str, Any]
) -> tuple[tuple[_T, _Family], tuple[_T, _Family] | None]:
    """Which branch is the semantic one: the count the metadata states, else a word for semantic or acoustic in
    a projection's name, else the smaller branch (Mimi's one semantic codebook), said in the notes."""
    if len(branches) == 1:
        return branches[0], None
    a, b = branches
    na, nb = len(a[1].books), len(b[1].books)
    stated = _meta(meta, "num_semantic")
    if stated is not None and (na == int(stated)) != (nb == int(stated)):
        return (a, b) if na == int(stated) else (b, a)
    suffix = _suffixes([a[0], b[0]])
    sa = has_word("semantic", suffix[a[0].name]) - has_word("acoustic", suffix[a[0].name])
    sb = has_word("semantic", suffix[b[0].name]) - has_word("acoustic", suffix[b[0].name])
    if sa != sb:
        return (a, b) if sa > sb else (b, a)
    if na != nb:
        small, big = (a, b) if na < nb else (b, a)
        c.notes.append(f"which codebook branch is the semantic one is in neither the metadata nor the names: "
                       f"assumed the smaller ({len(small[1].books)} codebook(s), projection '{small[0].name}'), as "
                       "Mimi's one semantic codebook")
        return small, big
    raise _refuse(f"{c.src}: two codebook branches of {na} codebooks each: cannot tell the semantic from the "
                  "acoustic one (give a layout map)", [a[0].name, b[0].name])


_STD_WORDS = frozenset("std stdev sigma scale deviation ecart abweichung desviacion deviazione".split())
_MEAN_WORDS = frozenset("mean mu avg average moyenne mittel mittelwert media".split())


def _latent(c: _Ctx, H: int, anchors: list[_T], exclude: set[str]) -> None:
    """PocketTTS's latents: an unnumbered projection [H, L] nearest the decoder, with two unnumbered vectors [L]
    that are no matrix's bias: the std (a word says so, else the one whose values are all > 0) and the mean."""
    free = [t for t in c.free() if t.name not in exclude]
    biases: dict[tuple[str, ...], set[int]] = defaultdict(set)
    for t in c.s.all.values():
        if len(t.shape) >= 2:
            biases[c.stem(t)].update(t.shape[:2])
    loose = [t for t in free
             if len(t.shape) == 1 and _num_pos(t) is None and t.shape[0] not in biases.get(c.stem(t), ())]
    cands: dict[str, list[_T]] = {}
    for t in free:
        m = t.mat()
        if m is not None and m[0] == H and _num_pos(t) is None:
            vs = [v for v in loose if v.shape == (m[1],)]
            if len(vs) >= 2:
                cands[t.name] = vs
    if not cands:
        raise NotThisFamily(f"{c.src}: no input of the decoder's width {H}: neither codebooks (numbered matrices "
                            f"[K, d] with a projection [{H}, d]) nor latents (a projection [{H}, L] with a std and a "
                            "mean [L])")
    proj, how = c.pick(_sorted(c.s.all[n] for n in cands), anchors, f"the latents' projection [{H}, L]")
    vs = cands[proj.name]
    L = vs[0].shape[0]
    if len(vs) > 2:
        near = {v.name: lcp(v.toks, proj.toks) for v in vs}
        vs = [v for v in vs if near[v.name] == max(near.values())]
    if len(vs) > 2:
        pair_score = {(x.name, y.name): lcp(x.toks, y.toks) for x, y in itertools.combinations(vs, 2)}
        best = max(pair_score.values())
        top = [k for k, v in pair_score.items() if v == best]
        if len(top) != 1:
            raise _refuse(f"{c.src}: the latents' std and mean: several vectors [{L}] could be", [v.name for v in vs])
        vs = [c.s.all[n] for n in top[0]]
    std, mean, vhow = _std_mean(c, vs[0], vs[1])
    c.take("latent.output_proj.weight", proj, how, proj.mat())
    c.take("latent.emb_std", std, vhow)
    c.take("latent.emb_mean", mean, vhow)


def _std_mean(c: _Ctx, x: _T, y: _T) -> tuple[_T, _T, str]:
    suffix = _suffixes([x, y])

    def word(t: _T) -> int:
        toks = suffix[t.name]
        return int(any(w in _STD_WORDS for w in toks)) - int(any(w in _MEAN_WORDS for w in toks))

    if word(x) != word(y):
        return (x, y, "name") if word(x) > word(y) else (y, x, "name")
    pos = [bool(np.all(np.isfinite(v)) and np.all(v > 0)) for v in (c.values(x), c.values(y))]
    if pos[0] != pos[1]:
        std, mean = (x, y) if pos[0] else (y, x)
        c.notes.append(f"the latents' std '{std.name}' and mean '{mean.name}' told apart by their values (a std is "
                       "> 0 throughout), not by their names")
        return std, mean, "name"
    raise _refuse(f"{c.src}: cannot tell the latents' std from their mean (no word, and both or neither > 0 "
                  "throughout)", [x.name, y.name])


# --- 5. biases ----------------------------------------------------------------------------------------------
def _bias(c: _Ctx, role: str, w: _T, n: int) -> None:
    """A weight's bias: the vector of length n whose name (without weight/bias words) differs least from the
    weight's, by its last token at most."""
    cands = [t for t in c.free() if t.shape == (n,)]
    sc = {t.name: lcp(t.stem, w.stem) for t in cands}
    need = max(len(w.stem) - 1, 1)
    top = _sorted(t for t in cands if sc[t.name] >= need and sc[t.name] == max(sc.values()))
    if not top:
        raise _refuse(f"{c.src}: no bias [{n}] named beside '{w.name}'", [t.name for t in cands][:6])
    t, how = top[0], ("shape" if len(cands) == 1 else "name")
    if len(top) > 1:
        if not c.same(top):
            raise _refuse(f"{c.src}: several vectors [{n}] are named as the bias of '{w.name}'", [x.name for x in top])
        for x in top[1:]:
            c.copies[x.name] = t.name
    c.take(role, t, how)


def _learn_kind_words(c: _Ctx) -> None:
    """The file's own words for weight and bias, when the vocabulary knows neither: the last tokens in which every
    SEANet conv's name differs from its bias's (the two told apart by shape), one word each throughout."""
    pairs = set()
    for role, a in c.s.out.items():
        if role.startswith("dec.") and role.endswith(".bias"):
            w, b = c.s.all[c.s.out[role[: -len("bias")] + "weight"].tensor], c.s.all[a.tensor]
            if len(w.toks) != len(b.toks) or w.toks[:-1] != b.toks[:-1]:
                return
            pairs.add((w.toks[-1], b.toks[-1]))
    if len(pairs) != 1:
        return
    (ww, bw), = pairs
    if ww == bw or has_word("weight", (ww,)) or has_word("bias", (bw,)):
        return
    c.learned.update({ww: "weight", bw: "bias"})
    c.notes.append(f"the words '{ww}' and '{bw}' end every conv's weight and bias (told apart by shape): read as "
                   "weight and bias in the other names")


# --- hyperparameters no tensor says -------------------------------------------------------------------------
#: metadata that marks the runtime a file was made for -> the built-in map whose [hparams] hold what that
#: runtime hard-codes (None: the metadata itself says it, a Hugging Face config), and the runtime's name
_DIALECTS: list[tuple[Callable[[dict[str, Any]], bool], str | None, str]] = [
    (lambda m: str(m.get("clip.gen.audio.projector_type", "")).startswith("pockettts"), "llamacpp-pockettts",
     "llama.cpp's PocketTTS (clip.gen.audio.projector_type)"),
    (lambda m: any(k.startswith("pocket_tts.") for k in m), "crispasr-pockettts",
     "CrispASR's pocket-tts (pocket_tts.*)"),
    (lambda m: any(k.startswith("codec.") for k in m), "codeccpp-mimi", "codec.cpp's (codec.*)"),
    (lambda m: any(k.startswith("decoder.") for k in m), None, "a Hugging Face config (transformers' MimiModel)"),
]
#: what a runtime may hard-code rather than store
_CONVENTIONS = ("context", "rope_theta", "norm_eps", "rope_interleaved", "gelu_tanh")


def _conventions(c: _Ctx, meta: dict[str, Any], latent: bool) -> dict[str, Any]:
    """RoPE's pairing, GELU's form and what else the tensors cannot say, from the runtime the metadata marks;
    without one, assumed (pocket-tts's for latents, transformers' for codes) and said."""
    stated = {k for k in ("context", "rope_theta", "norm_eps") if _meta(meta, k) is not None}
    if any(k in meta for k in GELU_KEYS):
        stated.add("gelu_tanh")
    for test, layout, label in _DIALECTS:
        if not test(meta):
            continue
        if layout is None:
            c.notes.append(f"RoPE's pairing is not in the tensors: rotate-half, as {label} decodes; the rest from "
                           "its config")
            return {}
        given = {k: v for k, v in get_layout(layout).hparams.items() if k in _CONVENTIONS and k not in stated}
        pairing = "interleaved pairs" if given.get("rope_interleaved") else "rotate-half"
        c.notes.append(f"RoPE's pairing ({pairing}) and what else the file leaves to its runtime are not in the "
                       f"tensors: the metadata is {label}, whose runtime hard-codes "
                       f"{', '.join(f'{k}={v}' for k, v in given.items())} (the built-in layout '{layout}')")
        return given
    if latent:
        given = {k: 1 for k in ("rope_interleaved", "gelu_tanh") if k not in stated}
        c.notes.append("RoPE's pairing (rotate-half or interleaved) cannot be told from the tensors and the metadata "
                       "names no runtime: assumed pocket-tts's for a decoder of latents, "
                       f"{', '.join(f'{k}=1' for k in given)}; give --hparam rope_interleaved=0 (gelu_tanh=0) if "
                       "the file's runtime rotates halves (uses the exact GELU)")
        return given
    c.notes.append("RoPE's pairing (rotate-half or interleaved) cannot be told from the tensors and the metadata "
                   "names no runtime: assumed transformers' (rotate-half" + (
                       "" if "gelu_tanh" in stated else ", exact erf GELU")
                   + ", kyutai/mimi); give --hparam rope_interleaved=1" + (
                       "" if "gelu_tanh" in stated else " (gelu_tanh=1)")
                   + " if the file's runtime pairs adjacent elements (uses GELU's tanh form)")
    return {}


# --- entry point --------------------------------------------------------------------------------------------
def infer_layout(raw: RawFile | str | Path, name: str | None = None) -> Proposal:
    """Propose a layout map for a Mimi decoder file from its structure; refuse (LayoutError, naming the tensors)
    when the file is not one, or when two tensors cannot be told apart."""
    if not isinstance(raw, RawFile):
        from kzlab.formats.reader import read

        raw = read(raw)
    c = _Ctx(_Solver(raw))
    meta = raw.metadata
    sea = _seanet(c)
    nb = len(sea.blocks)
    c.take("dec.0.conv.weight", sea.first, sea.first_how)
    for j, b in enumerate(sea.blocks, start=1):
        c.take(f"dec.{j}.convt.weight", b.convt, b.how)
        for m, (c1, c2, how) in enumerate(b.units):
            c.take(f"dec.{j}.res.{m}.conv1.weight", c1, how)
            c.take(f"dec.{j}.res.{m}.conv2.weight", c2, how)
    c.take(f"dec.{nb + 1}.conv.weight", sea.wave, "shape" if _alone(c, sea.wave) else "name")
    H = sea.first.shape[1]
    anchors = sea.tensors()
    _upsample(c, H, anchors)
    anchors.append(c.s.all[c.s.out["upsample.dwconv.weight"].tensor])
    layers, in_stacks = _transformer(c, H, anchors)
    anchors += [t for x in layers for t in x.mats]
    _bias(c, "dec.0.conv.bias", sea.first, sea.first.shape[0])
    for j, b in enumerate(sea.blocks, start=1):
        _bias(c, f"dec.{j}.convt.bias", b.convt, b.convt.shape[1])
        for m, (c1, c2, _how) in enumerate(b.units):
            _bias(c, f"dec.{j}.res.{m}.conv1.bias", c1, c1.shape[0])
            _bias(c, f"dec.{j}.res.{m}.conv2.bias", c2, c2.shape[0])
    _bias(c, f"dec.{nb + 1}.conv.bias", sea.wave, 1)
    _learn_kind_words(c)
    for i, layer in enumerate(layers):
        _layer_vecs(c, i, layer)
    latent = not _codes(c, H, in_stacks)
    if latent:
        _latent(c, H, anchors, in_stacks)
    if c.copies:
        shown = sorted(c.copies.items(), key=lambda kv: natural_key(kv[0]))
        c.notes.append(f"{len(shown)} tensor(s) are copies of the decoder's (same values), not used: "
                       + ", ".join(f"'{k}' (= '{v}')" for k, v in shown[:4]) + (" ..." if len(shown) > 4 else ""))

    notes = c.notes
    hp_notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hp = ARCH.hparams_from(dict(c.shapes), meta, c.src, notes=hp_notes)
    hp_notes += [str(w.message).replace(f"{c.src}: ", "") for w in caught]
    overrides = _conventions(c, meta, latent)
    heads = "metadata"
    if _meta(meta, "num_heads") is None and _meta(meta, "head_dim") is None:
        found = heads_from_metadata(meta, hp.num_heads * hp.head_dim)
        if found:
            overrides["num_heads"] = found[0]
            heads = f"key '{found[1]}'"
            notes.append(f"head count {found[0]} read from metadata key '{found[1]}'")
        else:
            heads = "assumed"
            hp_notes = [n for n in hp_notes if not n.startswith("no head count")]
            notes.append(f"no head count in the metadata: assumed {hp.num_heads} heads of {hp.head_dim} (shapes cannot "
                         "tell); give hparams={'num_heads': N} (--hparam num_heads=N) or num_heads under [hparams] in "
                         "the map")
    notes += [n for n in hp_notes if not any(n.startswith(f"no {k} in the metadata") for k in overrides)]
    hp = apply_overrides(hp, overrides, c.src) if overrides else hp
    _check(c, hp)

    order = {r.name: k for k, r in enumerate(decoder_roles(hp))}
    order.update({r.replace("attn_q.", "attn_{k}."): k for r, k in order.items() if ".attn_q." in r})
    assignments = sorted(c.s.out.values(), key=lambda a: order.get(a.role, len(order)))
    unused = sorted(set(c.s.all) - {a.tensor for a in assignments}, key=natural_key)
    return proposal_of(raw, name, assignments, MimiHParams.family, hp, dict(overrides), unused, notes, heads, sizes,
                       c.transforms)


def _check(c: _Ctx, hp: MimiHParams) -> None:
    """Every role found, with the shape the hyperparameters imply (size-1 axes aside; after a transform)."""
    missing, wrong = [], []
    want = {r.name: r for r in decoder_roles(hp)}
    for r in want.values():
        got = c.shapes.get(r.name)
        if got is None:
            if not r.optional:
                missing.append(r.name)
            continue
        if tuple(d for d in got if d != 1) != tuple(d for d in r.shape if d != 1):
            a = c.s.out.get(r.name) or c.s.out.get(r.name.replace(".attn_q.", ".attn_{k}."))
            wrong.append(a.tensor if a else r.name)
    extra = sorted(set(c.shapes) - set(want))
    if missing:
        raise LayoutError(f"{c.src}: inference found no tensor for role(s) {', '.join(missing[:8])}")
    if wrong or extra:
        raise _refuse(f"{c.src}: tensors whose shapes do not fit the decoder they imply",
                      wrong + [c.s.out[r].tensor for r in extra if r in c.s.out])


def sizes(hp: MimiHParams) -> str:
    """The proposal's one-line account of the sizes."""
    first = (f"{hp.file_quantizers} codebooks ({hp.num_semantic} semantic) of {hp.codebook_size} x {hp.codebook_dim}"
             if hp.input == "codes" else f"{hp.latent_dim}-d latents")
    return (f"{first}, upsample x{hp.upsample_stride}, {hp.num_layers} layers of {hp.num_heads} heads x "
            f"{hp.head_dim} (width {hp.hidden}, ffn {hp.intermediate_size}), SEANet {hp.seanet_channels} channels, "
            f"ratios {list(hp.ratios)}")


__all__ = ["Assignment", "infer_layout", "sizes"]
