"""WavTokenizer's layout inference: a map for a `wavtokenizer-dec` file whose tensors are named otherwise.

Shapes first: the depthwise convolutions [C, 1, k] give the width C and the ConvNeXt count, the one other
convolution with C outputs and neither 1 nor C inputs is the embedding conv (its inputs: the codebook width F),
the one matrix [V, F] is the codebook (a running statistic of it, whose name is the codebook's with words added,
such as codec.cpp's `embed_avg` beside `embed`, is passed over), the pointwise pair [ff, C] / [C, ff] appears
once per ConvNeXt block, and the one matrix [n_fft + 2, C] left is the head. AdaLayerNorm files (codec.cpp's)
keep each of those norms as tables [R, C], one row per bandwidth id: 2 per ConvNeXt block and 2 for the
embedding's norm, all of one R; such a table goes to a norm's weight or bias and is read through one row
(`row:bandwidth_id`, 0 unless `bandwidth_id` is given), the output norm being a plain LayerNorm. Then blocks:
tensors that share a name prefix up to their first number form one block; a block with a depthwise conv is a
ConvNeXt block, one with two [C, C, k] convolutions a posnet ResNet block, one with four [C, C] 1x1 convolutions
the attention block, one with only two C-vectors the posnet's closing GroupNorm; blocks are ordered by that
number. Within a block, the vectors
go to roles by name (a bias beside its weight, a norm's weight beside its bias), role words (q/k/v/o, norm,
gamma/scale, weight/bias) and numbers in the names (`norm1` before `norm2`), through the solver every
family shares (kzlab.formats.infer): when two tensors cannot be told apart it refuses and names them. A file
without the skeleton (depthwise convs, embedding conv, codebook, pointwise pairs, head) is refused as
`NotThisFamily`, so that another family's reason is read first. What the file cannot say (GroupNorm's group count
when no metadata states it) is noted; `kzlab layout infer --hparam group_norm_groups=N` writes it into the map.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from kzlab.arch.wavtokenizer.spec import WavTokenizerHParams, decoder_roles, hparams_from
from kzlab.errors import LayoutError
from kzlab.formats.infer import (
    _T,
    NotThisFamily,
    Proposal,
    Score,
    _ordinal,
    _refuse,
    _solve,
    _Solver,
    _suffixes,
    _word,
    lcp,
    natural_key,
    proposal_of,
)
from kzlab.formats.reader import RawFile


def _sq(t: _T) -> tuple[int, ...]:
    return tuple(d for d in t.shape if d != 1)


def _block_key(t: _T) -> tuple[str, ...] | None:
    """The name up to its first number (`posnet.3.conv1.weight` -> ('posnet', '3')), None without one."""
    for i, x in enumerate(t.toks):
        if x.isdigit():
            return t.toks[: i + 1]
    return None


def _assign(
    s: _Solver, items: list[_T], spec: dict[str, Callable[[_T], bool]], what: str,
    pairs: list[tuple[str, str]] = (), kinds: list[tuple[str, str, set[str]]] = (),
    order: list[tuple[str, str]] = (),
) -> None:
    """Give each role in `spec` (role -> shape test) one of `items`: among the shape-fitting assignments, the
    best by (names that sit together: `pairs`, role words: `kinds` role -> (its word, rival words), numbers in
    the names: `order`, (a, b) meaning a's number is below b's). `kinds` holds (role, its word, rival words);
    a role may have several."""
    roles = list(spec)
    suffix = _suffixes(items)

    def fits(r: str, t: _T, _partial: dict[str, _T]) -> bool:
        return spec[r](t)

    def score(a: dict[str, _T]) -> Score:
        t1 = sum(lcp(a[x].stem, a[y].stem) for x, y in pairs)
        t2 = sum(_word(k, rivals, suffix[a[r].name]) for r, k, rivals in kinds)
        t3 = 0
        for x, y in order:
            ox, oy = _ordinal(suffix[a[x].name]), _ordinal(suffix[a[y].name])
            if ox is not None and oy is not None and ox != oy:
                t3 += 1 if ox < oy else -1
        return (t1, t2, t3)

    for r, (t, how) in _solve(items, roles, lambda a: True, score, what, fits).items():
        s.take(r, t, how)


_WB = {"weight", "bias"}


def _wb(*roles: str) -> list[tuple[str, str, set[str]]]:
    """weight/bias words for the roles (by their last part)."""
    return [(r, "bias" if r.endswith("bias") else "weight", _WB) for r in roles]


def _statistics(books: list[_T]) -> tuple[list[_T], list[_T]]:
    """Codebook candidates split into (codebooks, running statistics): a candidate whose tokens are another's with
    words added (`embed_avg` beside `embed`, `embed.sum` beside `embed`) is a statistic kept with it for training,
    not read by the decoder. Structure only: made-up words keep the relation."""
    stats = [t for t in books if any(len(o.toks) < len(t.toks) and t.toks[: len(o.toks)] == o.toks for o in books)]
    return [t for t in books if t not in stats], stats


def _tables(outs: dict[int, list[_T]], C: int, ff: int, n_conv: int) -> tuple[int, list[_T]]:
    """AdaLayerNorm tables [R, C]: the one row count R (neither C nor ff) of exactly 2 * (n_conv + 1) matrices,
    a scale and a shift for each ConvNeXt block's norm and the embedding's. (0, []) when the file has none."""
    want = 2 * (n_conv + 1)
    rows = [r for r, ts in outs.items() if r not in (C, ff) and len(ts) == want and all(len(t.shape) == 2 for t in ts)]
    if len(rows) != 1:
        return 0, []
    return rows[0], outs[rows[0]]


def infer_layout(raw: RawFile | str | Path, name: str | None = None) -> Proposal:
    """Propose a layout map for a WavTokenizer decoder file from its structure; refuse (LayoutError, naming
    the tensors) when the file is not one or two tensors cannot be told apart."""
    if not isinstance(raw, RawFile):
        from kzlab.formats.reader import read

        raw = read(raw)
    s = _Solver(raw)
    src = s.src
    free = list(s.free.values())
    dws = [t for t in free if len(t.shape) == 3 and t.shape[1] == 1 and t.shape[0] > 1 and t.shape[2] > 1]
    widths = {t.shape[0] for t in dws}
    if not dws or len(widths) != 1:
        raise NotThisFamily(
            f"{src}: not a WavTokenizer decoder as far as the shapes tell: no depthwise convolutions [C, 1, k] "
            "of one width"
        )
    C = widths.pop()
    n_conv = len(dws)
    vec = lambda n: lambda t: _sq(t) == (n,)  # noqa: E731
    mats = [t for t in free if len(t.shape) == 2]
    outs = defaultdict(list)
    ins = defaultdict(list)
    for t in mats:
        if t.shape[1] == C:
            outs[t.shape[0]].append(t)
        if t.shape[0] == C:
            ins[t.shape[1]].append(t)
    ffs = [x for x in outs if x != C and len(outs[x]) == n_conv and len(ins.get(x, ())) == n_conv]
    if len(ffs) != 1:  # the strongest sign of the family: checked before any part that could be ambiguous
        raise NotThisFamily(f"{src}: not a WavTokenizer decoder as far as the shapes tell: no pointwise pair "
                            f"[ff, {C}] / [{C}, ff] for each of the {n_conv} depthwise convolutions [{C}, 1, k]")
    ff = ffs[0]
    # every part of the skeleton is looked for before any is refused as ambiguous: a file that lacks one is not
    # this family's (NotThisFamily), whatever else in it looks like the parts found first
    emb = [t for t in free if t.conv() and t.shape[0] == C and t.shape[1] not in (1, C) and t.shape[2] > 1]
    if not emb:
        raise NotThisFamily(f"{src}: not a WavTokenizer decoder as far as the shapes tell: no embedding "
                            f"convolution [{C}, F, k] beside the depthwise convolutions [{C}, 1, k]")
    R, tables = _tables(outs, C, ff, n_conv)
    heads = [t for x, ts in outs.items() if x not in (C, ff, R) and x > 2 and (x - 2) % 4 == 0 for t in ts]
    if not heads:
        raise NotThisFamily(f"{src}: not a WavTokenizer decoder as far as the shapes tell: no head matrix "
                            f"[n_fft + 2, {C}]")
    books_of = {f: _statistics([t for t in free if len(t.shape) == 2 and t.shape[1] == f and t.shape[0] != C
                                and t not in tables]) for f in {t.shape[1] for t in emb}}
    if not any(b for b, _ in books_of.values()):
        raise NotThisFamily(f"{src}: not a WavTokenizer decoder as far as the shapes tell: no codebook [V, F] "
                            f"for the embedding convolution [{C}, F, k]")
    if len(emb) != 1:
        raise _refuse(f"{src}: expected one embedding convolution [{C}, F, k]", [t.name for t in emb])
    F = emb[0].shape[1]
    books, stats = books_of[F]
    if len(books) != 1:
        raise _refuse(f"{src}: expected one codebook [V, {F}]", [t.name for t in books])
    if len(heads) != 1:
        raise _refuse(f"{src}: expected one head matrix [n_fft + 2, {C}]", [t.name for t in heads])
    n_out = heads[0].shape[0]
    notes: list[str] = []
    if stats:
        notes.append(f"the codebook '{books[0].name}' is also kept as running statistics for training "
                     f"({', '.join(repr(t.name) for t in stats)}: its name with words added): not used")
    tab = lambda t: t in tables  # noqa: E731
    norm_vec = lambda t: _sq(t) == (C,) or tab(t)  # noqa: E731

    # blocks: tensors that share a name prefix up to their first number
    groups: dict[tuple[str, ...], list[_T]] = defaultdict(list)
    top: list[_T] = []
    for t in free:
        k = _block_key(t)
        (groups[k] if k is not None else top).append(t)
    square = lambda t: _sq(t) == (C, C)  # noqa: E731
    conv3 = lambda t: len(t.shape) == 3 and t.shape[:2] == (C, C) and t.shape[2] > 1  # noqa: E731
    posnet: list[tuple[tuple[str, ...], str]] = []
    convnext: list[tuple[str, ...]] = []
    for k, ts in list(groups.items()):
        if any(t in dws for t in ts):
            convnext.append(k)
        elif sum(map(conv3, ts)) == 2:
            posnet.append((k, "resnet"))
        elif sum(map(square, ts)) == 4:
            posnet.append((k, "attn"))
        elif len(ts) == 2 and all(_sq(t) == (C,) for t in ts):
            posnet.append((k, "norm"))
        else:
            top.extend(groups.pop(k))
    if len(convnext) != n_conv:
        raise _refuse(f"{src}: {n_conv} depthwise convolutions but {len(convnext)} ConvNeXt blocks by name",
                      [t.name for t in dws])
    convnext.sort(key=lambda k: natural_key(".".join(k)))
    posnet.sort(key=lambda kk: natural_key(".".join(kk[0])))
    for i, k in enumerate(convnext):
        p = f"convnext.{i}."
        _assign(
            s, groups[k],
            {
                p + "dwconv.weight": lambda t: t in dws,
                p + "pw1.weight": lambda t: t.shape == (ff, C),
                p + "pw2.weight": lambda t: t.shape == (C, ff),
                p + "pw1.bias": vec(ff),
                p + "dwconv.bias": vec(C), p + "norm.weight": norm_vec, p + "norm.bias": norm_vec,
                p + "pw2.bias": vec(C), p + "gamma": vec(C),
            },
            f"ConvNeXt block {i}",
            pairs=[(p + "dwconv.bias", p + "dwconv.weight"), (p + "pw2.bias", p + "pw2.weight"),
                   (p + "pw1.bias", p + "pw1.weight"), (p + "norm.weight", p + "norm.bias")],
            kinds=_wb(p + "dwconv.bias", p + "norm.weight", p + "norm.bias", p + "pw2.bias")
            + [(p + "gamma", "scale", {"scale", "norm"}), (p + "norm.weight", "norm", {"scale", "norm"}),
               (p + "norm.bias", "norm", {"scale", "norm"})],
        )
    for i, (k, kind) in enumerate(posnet):
        p = f"posnet.{i}."
        if kind == "resnet":
            spec = {p + "conv1.weight": conv3, p + "conv2.weight": conv3}
            spec.update({p + r: vec(C) for r in
                         ("norm1.weight", "norm1.bias", "conv1.bias", "norm2.weight", "norm2.bias", "conv2.bias")})
            _assign(
                s, groups[k], spec, f"posnet block {i} (ResNet)",
                pairs=[(p + "conv1.bias", p + "conv1.weight"), (p + "conv2.bias", p + "conv2.weight"),
                       (p + "norm1.weight", p + "norm1.bias"), (p + "norm2.weight", p + "norm2.bias")],
                kinds=_wb(p + "norm1.weight", p + "norm1.bias", p + "norm2.weight", p + "norm2.bias",
                          p + "conv1.bias", p + "conv2.bias"),
                order=[(p + "conv1.weight", p + "conv2.weight"), (p + "norm1.weight", p + "norm2.weight"),
                       (p + "norm1.bias", p + "norm2.bias"), (p + "conv1.bias", p + "conv2.bias")],
            )
        elif kind == "attn":
            qkvo = {"q": "q", "k": "k", "v": "v", "output": "o"}
            spec = {p + f"attn_{w}.weight": square for w in qkvo}
            spec.update({p + f"attn_{w}.bias": vec(C) for w in qkvo})
            spec.update({p + "attn_norm.weight": vec(C), p + "attn_norm.bias": vec(C)})
            words = [(p + f"attn_{w}.{x}", o, set(qkvo.values())) for w, o in qkvo.items() for x in _WB]
            _assign(
                s, groups[k], spec, f"posnet block {i} (attention)",
                pairs=[(p + f"attn_{w}.bias", p + f"attn_{w}.weight") for w in qkvo]
                + [(p + "attn_norm.weight", p + "attn_norm.bias")],
                kinds=words + _wb(p + "attn_norm.weight", p + "attn_norm.bias"),
            )
        else:
            _assign(s, groups[k], {p + "attn_norm.weight": vec(C), p + "attn_norm.bias": vec(C)},
                    f"posnet block {i} (GroupNorm)", kinds=_wb(p + "attn_norm.weight", p + "attn_norm.bias"))
    rest = [t for t in top if t.name in s.free and (_sq(t) in ((C,), (n_out,)) or tab(t))]
    tn, on = "token_embd_norm.", "output_norm."
    anchors = {"token_embd.weight": books[0], "output.weight": heads[0], "conv1d.weight": emb[0]}
    items = rest + list(anchors.values())
    spec = {r: (lambda t, a=a: t is a) for r, a in anchors.items()}
    spec.update({"output.bias": vec(n_out), "conv1d.bias": vec(C)})
    spec.update({tn + "weight": norm_vec, tn + "bias": norm_vec, on + "weight": vec(C), on + "bias": vec(C)})
    _assign(
        s, items, spec, "embedding conv, norms and head",
        pairs=[("conv1d.bias", "conv1d.weight"), ("output.bias", "output.weight"),
               (tn + "weight", tn + "bias"), (on + "weight", on + "bias"),
               (tn + "weight", "token_embd.weight"), (tn + "bias", "token_embd.weight"),
               (on + "weight", "output.weight"), (on + "bias", "output.weight")],
        kinds=_wb(tn + "weight", tn + "bias", on + "weight", on + "bias", "conv1d.bias")
        + [(tn + x, "in", {"in", "out"}) for x in _WB] + [(on + x, "out", {"in", "out"}) for x in _WB],
    )

    shapes = {role: s.all[a.tensor].shape for role, a in s.out.items()}
    transforms: dict[str, tuple[str, str]] = {}
    for role, a in s.out.items():
        if s.all[a.tensor] in tables:
            shapes[role] = (C,)
            transforms[a.tensor] = ("row", "bandwidth_id")
    if transforms:
        notes.append(f"AdaLayerNorm tables [{R}, {C}] (one row per bandwidth id) for the embedding's norm and each "
                     f"ConvNeXt block's: {len(transforms)} tables read through one row, row 0 unless "
                     f"bandwidth_id is given (--hparam bandwidth_id=N, 0..{R - 1})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hp = hparams_from(shapes, raw.metadata, src, notes=notes)
    notes += [str(w.message).replace(f"{src}: ", "") for w in caught]
    _check(s, hp, shapes)
    unused = sorted(set(s.all) - {a.tensor for a in s.out.values()}, key=natural_key)
    order = {r.name: i for i, r in enumerate(decoder_roles(hp))}
    assignments = sorted(s.out.values(), key=lambda a: order.get(a.role, len(order)))
    return proposal_of(raw, name, assignments, WavTokenizerHParams.family, hp, {}, unused, notes, "metadata", sizes,
                       transforms)


def _check(s: _Solver, hp: WavTokenizerHParams, shapes: dict[str, tuple[int, ...]]) -> None:
    """Every role found, with the shape the hyperparameters imply (size-1 axes aside; a table as its row)."""
    missing, wrong = [], []
    for r in decoder_roles(hp):
        a = s.out.get(r.name)
        if a is None:
            missing.append(r.name)
            continue
        if tuple(d for d in shapes[r.name] if d != 1) != tuple(d for d in r.shape if d != 1):
            wrong.append(a.tensor)
    if missing:
        raise LayoutError(f"{s.src}: inference found no tensor for role(s) {', '.join(missing[:8])}")
    if wrong:
        raise _refuse(f"{s.src}: tensors whose shapes do not fit the decoder they imply", wrong)


def sizes(hp: WavTokenizerHParams) -> str:
    return (
        f"codebook {hp.vocab_size} x {hp.features}, {len(hp.posnet_kinds)} posnet blocks "
        f"({', '.join(hp.posnet_kinds)}), {hp.num_convnext} ConvNeXt blocks of {hp.dim} -> {hp.intermediate_size}, "
        f"n_fft {hp.n_fft}"
    )


__all__ = ["infer_layout"]
