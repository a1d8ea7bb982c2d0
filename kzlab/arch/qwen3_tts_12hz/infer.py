"""The Qwen3-TTS 12 Hz decoder's layout inference: its parts found from tensor shapes (codebooks and their
projections, pre_conv, the decoder blocks whose channels halve, the residual convolutions of each block, the
upsampling stages, the transformer layers), then the vectors by name (kzlab.formats.infer has the words, the
solver and the proposal every family shares)."""

from __future__ import annotations

import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from kzlab.arch.qwen3_tts_12hz.hparams import METADATA_ALIASES, OVERRIDABLE, HParams, _pick, hparams_from, replace
from kzlab.arch.qwen3_tts_12hz.roles import decoder_roles
from kzlab.errors import InvalidOptionError, LayoutError
from kzlab.formats.infer import (
    _T,
    Assignment,
    NotThisFamily,
    Proposal,
    Score,
    _attach,
    _ordinal,
    _Owner,
    _refuse,
    _sizes,
    _solve,
    _Solver,
    _suffixes,
    _word,
    _words,
    has_word,
    heads_from_metadata,
    lcp,
    natural_key,
    proposal_of,
    sides,
)
from kzlab.formats.reader import RawFile


# --- the parts of the decoder ---------------------------------------------------------------------------
def _quantizer(s: _Solver) -> dict[str, int]:
    """Codebooks [size, vq_dim] and the two output projections [codebook_dim, vq_dim]: the projections are
    the only pair of matrices whose input width is the codebooks' width and whose output feeds a
    kernel-3 convolution (pre_conv) [L, codebook_dim, 3], with the upsampling stages' depthwise convolutions
    [L, 1, 7] in the file. Without such a set the file is not this family's (NotThisFamily), and no ambiguity in
    a set found elsewhere is reported as this family's reason."""
    mats = [t for t in s.free.values() if t.mat()]
    by_shape: dict[tuple[int, int], list[_T]] = defaultdict(list)
    for t in mats:
        by_shape[t.mat()].append(t)
    found = []
    for (cd, vd), projs in by_shape.items():
        if len(projs) != 2:
            continue
        books = [t for t in s.free.values() if len(t.shape) == 2 and t.shape[1] == vd and t not in projs]
        pre = [t for t in s.free.values() if t.conv() and t.shape[1] == cd and t.shape[2] == 3]
        # the skeleton: the quantizer, and the upsampling stages' depthwise convs [L, 1, 7] after pre_conv
        if len(books) >= 2 and len(pre) == 1 and s.find(lambda t, L=pre[0].shape[0]: t.shape == (L, 1, 7)):
            found.append((projs, books, pre[0]))
    if not found:
        raise NotThisFamily(
            f"{s.src}: not a Qwen3-TTS 12 Hz decoder as far as the shapes tell: no set of codebooks with two "
            "output projections feeding a kernel-3 convolution [L, ., 3] that depthwise convolutions [L, 1, 7] follow"
        )
    if len(found) > 1:
        raise _refuse(f"{s.src}: several tensor sets look like the quantizer", [f[0][0].name for f in found])
    projs, books, pre = found[0]
    first, rest = _split_codebooks(s, books)
    s.take("vq.first.codebook", first[0], first[1])
    for i, (t, how) in enumerate(rest):
        s.take(f"vq.rest.{i}.codebook", t, how)
    # which projection follows the semantic codebook: the one whose name shares more with it, else the
    # one with a word for "semantic", else the lower number
    aff = [lcp(p.toks, first[0].toks) - max(lcp(p.toks, r.toks) for r, _ in rest) for p in projs]
    if aff[0] != aff[1]:
        p_first, p_rest = (projs[0], projs[1]) if aff[0] > aff[1] else (projs[1], projs[0])
        how = "name"
    elif (sem := [has_word("semantic", _suffixes(projs)[p.name]) for p in projs]) and sem[0] != sem[1]:
        p_first, p_rest = (projs[0], projs[1]) if sem[0] else (projs[1], projs[0])
        how = "name"
    else:
        o = [_ordinal(_suffixes(projs)[p.name]) for p in projs]
        if o[0] is None or o[1] is None or o[0] == o[1]:
            raise _refuse("cannot tell the semantic from the acoustic output projection", [p.name for p in projs])
        p_first, p_rest = (projs[0], projs[1]) if o[0] < o[1] else (projs[1], projs[0])
        how = "order"
    s.take("vq.first.output_proj.weight", p_first, how)
    s.take("vq.rest.output_proj.weight", p_rest, how)
    s.take("pre_conv.weight", pre, "shape")
    cd, vd = projs[0].mat()
    return {"vd": vd, "cd": cd, "L": pre.shape[0]}


def _split_codebooks(s: _Solver, books: list[_T]) -> tuple[tuple[_T, str], list[tuple[_T, str]]]:
    """The semantic codebook (first) and the acoustic ones in order. A different size tells the first
    for certain; otherwise a name family of its own (`first.codebook` beside `rest.{i}.codebook`), or
    the lowest number of a single family."""
    sizes = defaultdict(list)
    for b in books:
        sizes[b.shape[0]].append(b)
    if len(sizes) == 2 and min(len(v) for v in sizes.values()) == 1:
        first = next(v[0] for v in sizes.values() if len(v) == 1)
        rest = sorted((b for b in books if b is not first), key=lambda b: natural_key(b.name))
        return (first, "shape"), [(b, "order") for b in rest]
    if len(sizes) != 1:
        raise _refuse("codebooks of more than two sizes", [b.name for b in books])
    fams: dict[tuple[str, ...], list[_T]] = defaultdict(list)
    for b in books:
        fams[tuple("#" if t.isdigit() else t for t in b.toks)].append(b)
    if len(fams) == 2 and sorted(len(v) for v in fams.values())[0] == 1:
        first = next(v[0] for v in fams.values() if len(v) == 1)
        rest = sorted((b for b in books if b is not first), key=lambda b: natural_key(b.name))
        return (first, "name"), [(b, "order") for b in rest]
    if len(fams) == 1:
        ordered = sorted(books, key=lambda b: natural_key(b.name))
        return (ordered[0], "order"), [(b, "order") for b in ordered[1:]]
    raise _refuse("cannot tell which codebook is the semantic one", [b.name for b in books])


def _blocks(s: _Solver, L: int) -> dict[str, Any]:
    """Decoder blocks: transposed convolutions [c, c/2, 2 x rate], ordered by their (halving) channels;
    then each block's residual convolutions [c/2, c/2, 7] and [c/2, c/2, 1], paired by name."""
    convts = s.find(lambda t: bool(t.conv()) and t.shape[0] == 2 * t.shape[1] and t.shape[2] % 2 == 0)
    convts.sort(key=lambda t: -t.shape[0])
    chain = []
    for t in convts:
        if not chain or t.shape[0] == chain[-1].shape[1]:
            chain.append(t)
    if not chain:
        raise NotThisFamily(f"{s.src}: no decoder block found (transposed convolutions that halve the channels)")
    dim = chain[0].shape[0]
    dec0 = s.find(lambda t: t.shape == (dim, L, 7))
    if len(dec0) != 1:
        raise _refuse(f"expected one input convolution [{dim}, {L}, 7] for the decoder", [t.name for t in dec0])
    s.take("dec.0.conv.weight", dec0[0], "shape")
    units: dict[int, list[tuple[_T, _T]]] = {}
    for b, t in enumerate(chain, start=1):
        s.take(f"dec.{b}.convt.weight", t, "shape")
        c = t.shape[1]
        c1 = s.find(lambda x, c=c: x.shape == (c, c, 7))
        c2 = s.find(lambda x, c=c: x.shape == (c, c, 1) or x.shape == (c, c))
        if len(c1) != 3 or len(c2) != 3:
            raise _refuse(
                f"decoder block {b}: expected 3 + 3 residual convolutions of {c} channels", [x.name for x in c1 + c2]
            )
        pairs = _pair_by_name(c1, c2, f"residual units of decoder block {b}")
        pairs.sort(key=lambda p: natural_key(p[0].name))
        units[b] = pairs
        for j, (a, bb) in enumerate(pairs):
            s.take(f"dec.{b}.res.{j}.conv1.weight", a, "order")
            s.take(f"dec.{b}.res.{j}.conv2.weight", bb, "order")
    out_c = chain[-1].shape[1]
    last = s.find(lambda t: t.shape == (1, out_c, 7))
    if len(last) != 1:
        raise _refuse(f"expected one output convolution [1, {out_c}, 7]", [t.name for t in last])
    s.take(f"dec.{len(chain) + 2}.conv.weight", last[0], "shape")
    return {"chain": chain, "units": units, "dim": dim, "out_c": out_c}


def _pair_by_name(xs: list[_T], ys: list[_T], what: str) -> list[tuple[_T, _T]]:
    """Pair each x with the y whose name shares the longest prefix with it; refuse if not one-to-one."""
    pairs = []
    for x in xs:
        sc = [lcp(x.toks, y.toks) for y in ys]
        best = [y for y, v in zip(ys, sc, strict=True) if v == max(sc)]
        if len(best) != 1:
            raise _refuse(f"{what}: cannot tell which tensors belong together", [x.name] + [y.name for y in best])
        pairs.append((x, best[0]))
    if len({id(y) for _, y in pairs}) != len(pairs):
        raise _refuse(f"{what}: cannot tell which tensors belong together", [t.name for t in xs + ys])
    return pairs


def _upsampling(s: _Solver, L: int) -> int:
    """Upsampling stages: one depthwise convolution [L, 1, 7] each; the transposed convolution [L, L, r]
    and pointwise layers [4L, L], [L, 4L] of a stage are those whose names sit nearest to it."""
    dws = s.find(lambda t: t.shape == (L, 1, 7))
    if not dws:
        raise NotThisFamily(f"{s.src}: no upsampling stage found (depthwise convolutions [{L}, 1, 7])")
    cts = s.find(lambda t: bool(t.conv()) and t.shape[0] == L and t.shape[1] == L)
    pw1 = s.find(lambda t: t.mat() == (4 * L, L))
    pw2 = s.find(lambda t: t.mat() == (L, 4 * L))
    how_stage = "order" if len(dws) > 1 else "shape"
    for i, dw in enumerate(dws):  # natural order of names: the numbers in them
        s.take(f"up.{i}.dwconv.weight", dw, how_stage)
    for kind, group in (("convt", cts), ("pw1", pw1), ("pw2", pw2)):
        if len(group) != len(dws):
            raise _refuse(f"upsampling: expected {len(dws)} tensors for {kind}", [t.name for t in group])
        for t in group:
            sc = [lcp(t.toks, d.toks) for d in dws]
            best = [i for i, v in enumerate(sc) if v == max(sc)]
            if len(best) != 1:
                raise _refuse("upsampling: cannot tell which stage this tensor belongs to", [t.name])
            s.take(f"up.{best[0]}.{kind}.weight", t, how_stage)
    return len(dws)


def _transformer(s: _Solver, L: int) -> dict[str, Any]:
    """Transformer layers: the matrices left that carry a layer number, seven per layer, assigned by
    shape and role words; then the input [H, L] and output [L, H] projections."""
    mats = [t for t in s.free.values() if t.mat() and any(x.isdigit() for x in t.toks)]
    fams: dict[tuple[str, ...], list[_T]] = defaultdict(list)
    for t in mats:
        fams[tuple("#" if x.isdigit() else x for x in t.toks)].append(t)
    layers: dict[tuple[str, ...], list[_T]] = defaultdict(list)
    for fam in fams.values():
        digits = [i for i, x in enumerate(fam[0].toks) if x.isdigit()]
        varying = [i for i in digits if len({t.toks[i] for t in fam}) > 1]
        pos = (varying or digits)[0]
        for t in fam:
            layers[t.toks[: pos + 1]].append(t)
    layers = {k: v for k, v in layers.items() if len(v) >= 3}
    if not layers:
        raise NotThisFamily(f"{s.src}: no transformer layer found (numbered groups of projection matrices)")
    keys = sorted(layers, key=lambda k: natural_key(".".join(k)))
    info: dict[str, Any] = {"layers": []}
    H = None
    for i, k in enumerate(keys):
        got = _layer(s, i, layers[k])
        if H is not None and got["H"] != H:
            raise _refuse(f"transformer layer {i} has width {got['H']}, layer 0 has {H}", [t.name for t in layers[k]])
        H = got["H"]
        info["layers"].append(got)
    info["H"] = H
    inp = s.find(lambda t: t.mat() == (H, L))
    outp = s.find(lambda t: t.mat() == (L, H))
    if H != L:
        if len(inp) != 1 or len(outp) != 1:
            raise _refuse("expected one transformer input and one output projection", [t.name for t in inp + outp])
        s.take("tfm.input_proj.weight", inp[0], "shape")
        s.take("tfm.output_proj.weight", outp[0], "shape")
    else:
        got = _solve(
            inp,
            ["tfm.input_proj.weight", "tfm.output_proj.weight"],
            lambda a: True,
            lambda a: (0, _words(a, {"tfm.input_proj.weight": "in", "tfm.output_proj.weight": "out"}), 0),
            "transformer input/output projections",
        )
        for r, (t, how) in got.items():
            s.take(r, t, how)
    return info


_LAYER_MATS = ["attn_q", "attn_k", "attn_v", "attn_o", "ffn_gate", "ffn_up", "ffn_down"]


def _layer(s: _Solver, i: int, group: list[_T]) -> dict[str, Any]:
    suffix = _suffixes(group)
    kinds = {r: r.split("_")[1] for r in _LAYER_MATS}
    rivals = set(kinds.values())
    mat = {t.name: t.mat() for t in group}
    # role words of each pairing, and half a point for a word of the right side
    unary = {
        (r, t.name): _word(kinds[r], rivals, suffix[t.name])
        + 0.5 * has_word("attn" if r.startswith("attn") else "ffn", suffix[t.name])
        for r in _LAYER_MATS
        for t in group
    }

    def ok(a: dict[str, _T]) -> bool:
        q, k, v, o = (mat[a[r].name] for r in _LAYER_MATS[:4])
        g, u, d = (mat[a[r].name] for r in _LAYER_MATS[4:])
        H = q[1]
        return k == v and k[1] == H and o == (H, q[0]) and q[0] % k[0] == 0 and g == u and g[1] == H and d == (H, g[0])

    def fits(r: str, t: _T, a: dict[str, _T]) -> bool:
        """`ok`, checked as soon as the roles it relates are given (roles are given in _LAYER_MATS order)."""
        m = mat[t.name]
        q = mat[a["attn_q"].name] if "attn_q" in a else None
        if q is None:
            return True
        if r == "attn_k":
            return m[1] == q[1] and q[0] % m[0] == 0
        if r == "attn_v":
            return m == mat[a["attn_k"].name]
        if r == "attn_o":
            return m == (q[1], q[0])
        if r == "ffn_gate":
            return m[1] == q[1]
        if r == "ffn_up":
            return m == mat[a["ffn_gate"].name]
        return m == (q[1], mat[a["ffn_gate"].name][0])  # ffn_down

    def score(a: dict[str, _T]) -> Score:
        return (0, sum(unary[(r, t.name)] for r, t in a.items()), 0)

    got = _solve(group, _LAYER_MATS, ok, score, f"transformer layer {i}", fits)
    names = {r: t for r, (t, _) in got.items()}
    for r, (t, how) in got.items():
        s.take(f"tfm.blk.{i}.{r}.weight", t, how)
    return {
        "H": names["attn_q"].mat()[1],
        "attn": [names[r] for r in _LAYER_MATS[:4]],
        "ffn": [names[r] for r in _LAYER_MATS[4:]],
    }


def _vectors(s: _Solver, dims: dict[str, Any], blocks: dict[str, Any], n_up: int, tfm: dict[str, Any]) -> None:
    """Biases, norms, scales, snake parameters and usage counts: each part states how many vectors of which
    length it needs; vectors go to parts by name (`_attach`), then to roles within the part (`_fill`)."""
    L, H, out_c = dims["L"], tfm["H"], blocks["out_c"]
    A = s.out
    T = s.all

    def ts(*roles: str) -> list[_T]:
        return [T[A[r].tensor] for r in roles]

    owners: dict[str, _Owner] = {}

    def own(key: str, roles: list[str], sizes: dict[int, int], **kw: Any) -> None:
        owners[key] = _Owner(key, ts(*roles), sizes, **kw)

    nq = 1 + sum(1 for r in A if r.startswith("vq.rest.") and r.endswith(".codebook"))
    for p in ["vq.first"] + [f"vq.rest.{i}" for i in range(nq - 1)]:
        cb = T[A[f"{p}.codebook"].tensor]
        idx = [i for i, x in enumerate(cb.stem) if x.isdigit()]
        own(p, [f"{p}.codebook"], {cb.shape[0]: 1}, min_lcp=(idx[-1] + 1 if idx else len(cb.stem) - 1), optional=True)
    own("pre_conv", ["pre_conv.weight"], {L: 1})
    own("tfm", ["tfm.input_proj.weight", "tfm.output_proj.weight"], _sizes((H, 2), (L, 1)))
    for i, _ in enumerate(tfm["layers"]):
        own(f"tfm.blk.{i}", [f"tfm.blk.{i}.{r}.weight" for r in _LAYER_MATS], {H: 4})
    for i in range(n_up):
        own(f"up.{i}", [f"up.{i}.{k}.weight" for k in ("convt", "dwconv", "pw1", "pw2")], _sizes((L, 6), (4 * L, 1)))
    own("dec.0", ["dec.0.conv.weight"], {blocks["dim"]: 1})
    for b, t in enumerate(blocks["chain"], start=1):
        own(f"dec.{b}", [f"dec.{b}.convt.weight"], _sizes((t.shape[0], 2), (t.shape[1], 1)))
        for j in range(3):
            own(f"dec.{b}.res.{j}", [f"dec.{b}.res.{j}.conv1.weight", f"dec.{b}.res.{j}.conv2.weight"], {t.shape[1]: 6})
    nb = len(blocks["chain"])
    own(f"dec.{nb + 2}", [f"dec.{nb + 2}.conv.weight"], {1: 1})
    owners["snake_out"] = _Owner("final snake", [], {out_c: 2})
    _attach(s, list(owners.values()))

    for key, o in owners.items():
        if key.startswith("vq."):
            if o.got:
                s.take(f"{key}.usage", o.got[0], "name")
            continue
        _fill(s, key, o, blocks, nb)
    usage = sum(1 for r in s.out if r.endswith(".usage"))
    if usage not in (0, nq):
        have = [s.out[r].tensor for r in s.out if r.endswith(".usage")]
        raise _refuse(f"usage counts found for {usage} of {nq} codebooks only", have)


def _fill(s: _Solver, key: str, o: _Owner, blocks: dict[str, Any], nb: int) -> None:
    """Assign the vectors a part collected to its vector roles."""
    A, T = s.out, s.all
    W = lambda r: T[A[r].tensor]  # noqa: E731
    roles: list[str]
    bias_of: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    kinds: dict[str, str] = {}
    seq: list[tuple[str, str]] = []
    size: dict[str, int] = {}
    side: dict[str, list[_T]] = {}
    if key in ("pre_conv", "dec.0") or key == f"dec.{nb + 2}":
        w = "pre_conv.weight" if key == "pre_conv" else f"{key}.conv.weight"
        roles = [w.replace("weight", "bias")]
        bias_of[roles[0]] = w
    elif key == "tfm":
        roles = ["tfm.input_proj.bias", "tfm.output_proj.bias", "tfm.norm.weight"]
        bias_of = {"tfm.input_proj.bias": "tfm.input_proj.weight", "tfm.output_proj.bias": "tfm.output_proj.weight"}
        size = {
            "tfm.input_proj.bias": W("tfm.input_proj.weight").mat()[0],
            "tfm.output_proj.bias": W("tfm.output_proj.weight").mat()[0],
            "tfm.norm.weight": W("tfm.input_proj.weight").mat()[0],
        }
        kinds = {"tfm.norm.weight": "norm"}
    elif key.startswith("tfm.blk."):
        roles = [f"{key}.{r}" for r in ("attn_norm.weight", "attn_scale", "ffn_norm.weight", "ffn_scale")]
        kinds = {roles[0]: "norm", roles[1]: "scale", roles[2]: "norm", roles[3]: "scale"}
        attn = [W(f"{key}.{r}.weight") for r in _LAYER_MATS[:4]]
        ffn = [W(f"{key}.{r}.weight") for r in _LAYER_MATS[4:]]
        side = {roles[0]: attn, roles[1]: attn, roles[2]: ffn, roles[3]: ffn}
        seq = [(roles[0], roles[2]), (roles[1], roles[3])]
    elif key.startswith("up."):
        roles = [
            f"{key}.{r}"
            for r in ("convt.bias", "dwconv.bias", "pw1.bias", "pw2.bias", "norm.weight", "norm.bias", "gamma")
        ]
        for r in roles[:4]:
            bias_of[r] = r.replace("bias", "weight")
        pairs = [(roles[4], roles[5])]
        kinds = {roles[4]: "weight", roles[5]: "bias"}
        size = {roles[2]: W(f"{key}.pw1.weight").mat()[0]}
    elif ".res." in key:
        roles = [
            f"{key}.{r}" for r in ("conv1.bias", "conv2.bias", "act1.alpha", "act1.beta", "act2.alpha", "act2.beta")
        ]
        bias_of = {roles[0]: f"{key}.conv1.weight", roles[1]: f"{key}.conv2.weight"}
        pairs = [(roles[2], roles[3]), (roles[4], roles[5])]
        kinds = {roles[2]: "alpha", roles[3]: "beta", roles[4]: "alpha", roles[5]: "beta"}
        seq = [(roles[2], roles[4]), (roles[3], roles[5]), (roles[2], roles[3]), (roles[4], roles[5])]
    elif key == "snake_out":
        roles = [f"dec.{nb + 1}.snake.alpha", f"dec.{nb + 1}.snake.beta"]
        kinds = {roles[0]: "alpha", roles[1]: "beta"}
        seq = [(roles[0], roles[1])]
    else:  # decoder block
        t = W(f"{key}.convt.weight")
        roles = [f"{key}.convt.bias", f"{key}.snake.alpha", f"{key}.snake.beta"]
        bias_of = {roles[0]: f"{key}.convt.weight"}
        kinds = {roles[1]: "alpha", roles[2]: "beta"}
        size = {roles[0]: t.shape[1], roles[1]: t.shape[0], roles[2]: t.shape[0]}
        seq = [(roles[1], roles[2])]
    if len(o.got) != len(roles):
        raise _refuse(f"{o.key}: expected {len(roles)} vectors, found {len(o.got)}", [v.name for v in o.got])
    suffix = _suffixes(o.got)
    number = {t.name: _ordinal(suffix[t.name]) for t in o.got}
    close = {(x.name, y.name): lcp(x.stem, y.stem) for x in o.got for y in o.got}
    rivals = set(kinds.values())
    first_side = next(iter(side.values()), None)

    def fits(r: str, t: _T, _partial: dict[str, _T]) -> bool:
        want = size.get(r) or (
            W(bias_of[r]).shape[1] if r.endswith("convt.bias") else W(bias_of[r]).shape[0] if r in bias_of else None
        )
        return want is None or t.shape[0] == want

    unary: dict[tuple[str, str], tuple[float, float]] = {}

    def one(r: str, t: _T) -> tuple[float, float]:
        """What a single pairing scores: (name structure, role words), the same in every assignment."""
        got = unary.get((r, t.name))
        if got is None:
            u1 = lcp(t.stem, W(bias_of[r]).stem) if r in bias_of else 0
            u2 = _word(kinds[r], rivals, suffix[t.name]) if r in kinds else 0
            if r in side:  # the layer's attention or MLP: tensors whose names share more, then side words
                u1 += max(lcp(t.stem, m.stem) for m in side[r])
                mine, other = ("attn", "ffn") if side[r] is first_side else ("ffn", "attn")
                said = sides(suffix[t.name])
                u2 += 2 * (mine in said) - 2 * (other in said)
            got = unary[(r, t.name)] = (u1, u2)
        return got

    def score(a: dict[str, _T]) -> Score:
        t1 = t2 = 0.0
        for r, t in a.items():
            u1, u2 = one(r, t)
            t1, t2 = t1 + u1, t2 + u2
        t1 += sum(close[(a[x].name, a[y].name)] for x, y in pairs)
        t3 = 0
        for x, y in seq:
            ox, oy = number[a[x].name], number[a[y].name]
            if ox is not None and oy is not None and ox != oy:
                t3 += 1 if ox < oy else -1
        return (t1, t2, t3)

    for r, (t, how) in _solve(o.got, roles, lambda a: True, score, o.key, fits).items():
        s.take(r, t, how)





def apply_overrides(hp: HParams, values: dict[str, Any], source: str = "") -> HParams:
    """Hyperparameters that neither shapes nor metadata tell (the head count above all), given by the
    user or by a layout map's `[hparams]` table. Widths stay as the shapes say; heads must divide them."""
    from kzlab.formats.given import coerce

    values = coerce(values, OVERRIDABLE, "a Qwen3-TTS 12 Hz decoder (tensor shapes decide the rest)", source)
    q_w, kv_w = hp.num_heads * hp.head_dim, hp.num_kv_heads * hp.head_dim
    hd = hp.head_dim
    if "head_dim" in values:
        hd = int(values["head_dim"])
    elif "num_heads" in values:
        n = int(values["num_heads"])
        hd = q_w // n if n > 0 and q_w % n == 0 else 0
    elif "num_kv_heads" in values:
        n = int(values["num_kv_heads"])
        hd = kv_w // n if n > 0 and kv_w % n == 0 else 0
    if hd <= 0 or q_w % hd or kv_w % hd:
        raise InvalidOptionError(f"{source}: heads {values} do not divide the attention widths q={q_w}, kv={kv_w}")
    out = replace(hp, head_dim=hd, num_heads=q_w // hd, num_kv_heads=kv_w // hd)
    for k in ("num_heads", "num_kv_heads"):
        if k in values and int(values[k]) != getattr(out, k):
            raise InvalidOptionError(f"{source}: {k}={values[k]} does not fit head_dim {hd} and width {q_w}")
    for k in ("sliding_window", "rope_theta", "rms_norm_eps", "sample_rate"):
        if k in values:
            out = replace(out, **{k: type(getattr(HParams(), k))(values[k])})
    return out


# --- entry point --------------------------------------------------------------------------------------
def infer_layout(raw: RawFile | str | Path, name: str | None = None) -> Proposal:
    """Propose a layout map for a decoder file from its structure; refuse (LayoutError, naming the
    tensors) when the file is not this decoder or two tensors cannot be told apart."""
    if not isinstance(raw, RawFile):
        from kzlab.formats.reader import read

        raw = read(raw)
    s = _Solver(raw)
    dims = _quantizer(s)
    L = dims["L"]
    blocks = _blocks(s, L)
    n_up = _upsampling(s, L)
    tfm = _transformer(s, L)
    _vectors(s, dims, blocks, n_up, tfm)

    shapes = {}
    for role, a in s.out.items():
        t = s.all[a.tensor]
        shapes[role] = t.mat() if role.endswith("proj.weight") and t.mat() else t.shape
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hp = hparams_from(shapes, raw.metadata, s.src)
    notes += [str(w.message).replace(f"{s.src}: ", "") for w in caught]
    overrides: dict[str, Any] = {}
    heads = "metadata"
    q_width = hp.num_heads * hp.head_dim
    known = _pick(raw.metadata, METADATA_ALIASES["num_heads"]) or _pick(raw.metadata, METADATA_ALIASES["head_dim"])
    if known is None:
        found = heads_from_metadata(raw.metadata, q_width)
        if found:
            overrides["num_heads"] = found[0]
            hp = apply_overrides(hp, overrides, s.src)
            notes.append(f"head count {found[0]} read from metadata key '{found[1]}'")
            heads = f"key '{found[1]}'"
        else:
            notes.append(
                f"no head count in the metadata: assumed {hp.num_heads} heads of {hp.head_dim} (shapes cannot "
                "tell); give hparams={'num_heads': N} (--hparam num_heads=N) or num_heads under [hparams] in the map"
            )
            heads = "assumed"
    _check(s, hp)
    unused = sorted(set(s.all) - {a.tensor for a in s.out.values()}, key=natural_key)
    order = {r.name: i for i, r in enumerate(decoder_roles(hp))}
    assignments = sorted(s.out.values(), key=lambda a: order.get(a.role, len(order)))
    # the first family's maps name no family: it is the one a map without `family` belongs to
    return proposal_of(raw, name, assignments, "", hp, overrides, unused, notes, heads, sizes)


def _check(s: _Solver, hp: HParams) -> None:
    """Every required role found with the shape the hyperparameters imply (else: not this decoder)."""
    missing, wrong = [], []
    for r in decoder_roles(hp):
        a = s.out.get(r.name)
        if a is None:
            if not r.optional:
                missing.append(r.name)
            continue
        got = tuple(d for d in s.all[a.tensor].shape if d != 1)
        if got != tuple(d for d in r.shape if d != 1):
            wrong.append(a.tensor)
    if missing:
        raise LayoutError(f"{s.src}: inference found no tensor for role(s) {', '.join(missing[:8])}")
    if wrong:
        raise _refuse(f"{s.src}: tensors whose shapes do not fit the decoder they imply", wrong)


def sizes(hp: HParams) -> str:
    """The proposal's one-line account of the sizes."""
    return (
        f"{hp.num_quantizers} codebooks, {hp.num_layers} layers of {hp.num_heads} heads x {hp.head_dim}, "
        f"latent {hp.latent_dim}, decoder_dim {hp.decoder_dim}"
    )


__all__ = ["Assignment", "apply_overrides", "infer_layout"]
