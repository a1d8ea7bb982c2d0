"""Structural inference: a layout map for a decoder file whose tensor names no known dialect uses.

Names differ between converters, structure does not. Each decoder family finds its parts from tensor shapes
first (its files half's `infer_layout`, kzlab.formats.family_files); the numbers in the names and their common
prefixes then tell which small vectors (biases, norms, scales) belong to which part; only where several tensors
have the same shape *and* the same place does a small vocabulary of role words decide (alpha/beta, q/k/v,
gate/up, norm/scale...), with numbers in the names (`act1` before `act2`) as the last resort. Tensor order in
the file is never used: files are rewritten in any order. When two tensors still cannot be told apart,
inference refuses and names both. This module holds what every family's inference shares: the words, the
solver that gives roles to tensors, the proposal, and the entry point that asks the families.

Every family is asked. A family that finds none of its decoder's skeleton in the file says so with `NotThisFamily`;
any other refusal means the skeleton is there but something in it cannot be decided (two tensors of one shape and
no word apart). When no family maps the file, the refusal (`NoFamilyFits`) gives every family's reason, those that
found their skeleton first: one family's "not mine" is never the whole answer.

Names are read as words: split at every separator, at camelCase and before a capital that starts a word
(`normWAntes` -> norm, w, antes). A word counts wherever it stands in a segment, so `norm_attn`, `attnNorm`,
`ln-ffn`, `mlp_ln`, `ls_mlp` and `post_attention_layernorm` all tell the side of a transformer norm or
scale; prefixes are compared without the words for weight, bias, alpha and beta (`bias_conv1` sits beside
`conv1.weight` as `conv1.bias` does).

Every assignment records how it was decided: `shape` (no other tensor fits: certain), `name` (the name's
structure or a role word decided) or `order` (numbers in the names decided). The proposal is a plain
`LayoutMap` of exact names, so it can be written with `kzlab layout infer -o map.toml`, read, edited and
passed back as `layout=`.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.errors import InvalidOptionError, KzlabError, LayoutError
from kzlab.formats.layout import LayoutMap
from kzlab.formats.reader import RawFile

# A small multilingual vocabulary (English, French, German, Spanish, Italian; common abbreviations).
# Tokens are lower-cased and stripped of accents before lookup.
_W: dict[str, frozenset[str]] = {
    k: frozenset(v.split())
    for k, v in {
        "q": "q wq query queries requete anfrage consulta",
        "k": "k wk key keys cle clef schluessel schlussel clave chiave",
        "v": "v wv value values valeur wert valor valore",
        "o": "o wo out output dense sortie ausgabe salida uscita",
        "gate": "gate gating w1 porte tor puerta",
        "up": "up w3 haut hoch auf arriba su",
        "down": "down w2 bas runter ab abajo giu",
        "alpha": "alpha a freq frequency frequence frequenz frecuencia frequenza",
        "beta": "beta b amp amplitude magnitude mag amplitud ampiezza",
        "weight": "weight w g gain poids gewicht peso kernel",
        "bias": "bias b biais shift offset sesgo verschiebung",
        "norm": "norm ln rms layernorm rmsnorm norme normalisation normalization normierung",
        "scale": "scale ls gamma layerscale echelle skala escala scala",
        "attn": "attn attention att self sa aufmerksamkeit atencion attenzione",
        "ffn": "ffn mlp ff feedforward feed fc ffw ffwd reseau rete",
        "pre": "pre input first before avant vor erste primero antes prima",
        "post": "post after second apres nach zweite segundo despues dopo",
        "in": "in input inp entree eingang entrada ingresso",
        "out": "out output sortie ausgang salida uscita",
        "encoder": "enc encoder encodeur codeur kodierer codificador",
        "semantic": "semantic sem first semantique semantisch semantico premier erster primero",
        "acoustic": "acoustic ac rest acoustique akustisch acustico reste resto residual",
        "heads": "head heads nhead nheads tete tetes kopf koepfe kopfe cabeza cabezas testa teste",
    }.items()
}
#: words that also count when they are part of a longer token ("layernorm", "layerscale")
_INFIX = {"norm": ("norm",), "scale": ("scale",)}

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")  # `normAttn`, `normWAntes`
_SPLIT = re.compile(r"[^0-9a-z]+")


def tokens(name: str) -> tuple[str, ...]:
    """The words and numbers of a tensor name: split at any separator and at camelCase, lower-cased,
    accents removed (`Tête_Attn.0` -> ('tete', 'attn', '0'))."""
    folded = unicodedata.normalize("NFKD", _CAMEL.sub(" ", name))
    folded = "".join(c for c in folded if not unicodedata.combining(c)).lower()
    return tuple(t for t in _SPLIT.split(folded) if t)


def has_word(kind: str, toks: Iterable[str]) -> bool:
    """Whether any token is one of the words for `kind` (also with a number after or before it: `ln1`,
    `ls2`, `2ln`)."""
    words, infix = _W[kind], _INFIX.get(kind, ())
    return any(t in words or t.strip("0123456789") in words or any(i in t for i in infix) for t in toks)


#: words that say which tensor of a module a name is (weight or bias, a snake's alpha or beta), not which module
_KIND_WORDS = _W["weight"] | _W["bias"] | _W["alpha"] | _W["beta"]


def stem(toks: tuple[str, ...]) -> tuple[str, ...]:
    """The tokens that name the module: without the words for weight, bias, alpha and beta, wherever they
    stand (`conv1.bias`, `bias_conv1` and `biasConv1` all have the stem `conv1`)."""
    return tuple(t for t in toks if t not in _KIND_WORDS)


def _is(kind: str, t: str) -> bool:
    return has_word(kind, (t,))


def sides(toks: Iterable[str]) -> set[str]:
    """The transformer sides ("attn", "ffn") that the words of a norm's or a scale's name point to: a side
    word (`attn`, `mlp`, `aufmerksamkeit`), a position word (`pre`/`input` for attention, `post` for the MLP),
    or both in one phrase: a position word right before a side word says where the tensor sits relative to
    that side (`pre_attn` and `input` are attention's, `pre_mlp`, `post_mlp` and `post_attention` the MLP's)."""
    toks = list(toks)
    out: set[str] = set()
    used: set[int] = set()
    i = 0
    while i < len(toks):
        side = "attn" if _is("attn", toks[i]) else "ffn" if _is("ffn", toks[i]) else None
        if side is None:
            i += 1
            continue
        k = i
        while k + 1 < len(toks) and _is(side, toks[k + 1]):  # one phrase: `self attn`, `feed forward`
            k += 1
        before = i - 1
        if before >= 0 and _is("post", toks[before]) and not _is("pre", toks[before]):
            out.add("ffn")  # after attention, or the MLP's own
            used.add(before)
        elif before >= 0 and _is("pre", toks[before]) and not _is("post", toks[before]):
            out.add(side)
            used.add(before)
        else:
            out.add(side)
        i = k + 1
    for i, t in enumerate(toks):
        if i in used or _is("attn", t) or _is("ffn", t):
            continue
        if _is("pre", t) and not _is("post", t):
            out.add("attn")
        elif _is("post", t) and not _is("pre", t):
            out.add("ffn")
    return out


def lcp(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """Length of the common token prefix: how close two tensors sit in the module tree."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def natural_key(name: str) -> tuple:
    """Sort key that orders numbers by value (`blk.10` after `blk.9`)."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in tokens(name))


def _ordinal(toks: Iterable[str]) -> int | None:
    """The first number in some tokens (`act2` -> 2, `3` -> 3), for ordering sibling modules."""
    for t in toks:
        m = re.search(r"\d+", t)
        if m:
            return int(m.group())
    return None


# --- result -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Assignment:
    """One tensor given a canonical role, and on what grounds."""

    role: str
    tensor: str
    how: str  # "shape", "name" or "order"

    @property
    def certain(self) -> bool:
        """Only a unique shape is certain; names and numbers are conventions a file may break."""
        return self.how == "shape"


@dataclass
class Proposal:
    """A complete map of one file onto the canonical roles, with the hyperparameters it implies."""

    layout: LayoutMap
    assignments: list[Assignment]
    hparams: Any
    overrides: dict[str, Any] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    heads: str = "metadata"  # where the head count came from: "metadata", "key '...'", "given" or "assumed"
    #: the family's one-line account of the sizes the hyperparameters say (its infer module gives it)
    sizes: Callable[[Any], str] = field(default=lambda hp: "", repr=False)

    def counts(self) -> dict[str, int]:
        out = {"shape": 0, "name": 0, "order": 0}
        for a in self.assignments:
            out[a.how] += 1
        return out

    def summary(self) -> str:
        c = self.counts()
        return (
            f"{len(self.assignments)} tensors mapped ({c['shape']} by shape, {c['name']} by name, "
            f"{c['order']} by order), {len(self.unused)} unused; {self.sizes(self.hparams)}"
            + (
                "; no head count in the file: heads assumed, give hparams={'num_heads': N} (--hparam num_heads=N)"
                if self.heads == "assumed"
                else "; head count given"
                if self.heads == "given"
                else f"; head count from metadata {self.heads}"
                if self.heads != "metadata"
                else ""
            )
        )

    def describe(self) -> str:
        """The full proposal as text (what `kzlab layout infer` prints)."""
        lines = [self.summary(), ""]
        w = max((len(a.role) for a in self.assignments), default=0)
        for a in self.assignments:
            lines.append(f"  {a.role:<{w}}  <- {a.tensor}   [{a.how}{'' if a.certain else ', uncertain'}]")
        if self.layout.transforms:
            lines += ["", f"value transforms ({len(self.layout.transforms)}), applied at load:"]
            lines += [f"  {rx.pattern}  {k}{':' + a if a else ''}" for rx, (k, a) in self.layout.transforms]
        if self.unused:
            lines += ["", f"not used by the decoder ({len(self.unused)}): " + ", ".join(self.unused[:12])]
        lines += ["", "hyperparameters: " + ", ".join(f"{k}={v}" for k, v in self.hparams.to_dict().items())]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# --- tensors under consideration ------------------------------------------------------------------------
@dataclass(frozen=True)
class _T:
    name: str
    shape: tuple[int, ...]
    toks: tuple[str, ...]
    stem: tuple[str, ...] = ()  # the tokens without weight/bias/alpha/beta words: the module's name

    def mat(self) -> tuple[int, int] | None:
        """The shape as a matrix [out, in]; converters sometimes keep a size-1 kernel axis."""
        s = self.shape
        if len(s) == 2:
            return s[0], s[1]
        if len(s) == 3 and s[2] == 1:
            return s[0], s[1]
        if len(s) == 3 and s[0] == 1:
            return s[1], s[2]
        return None

    def conv(self) -> tuple[int, int, int] | None:
        s = self.shape
        if len(s) == 3:
            return s[0], s[1], s[2]
        return None


class NotThisFamily(LayoutError):
    """A family's inference found none of its decoder's skeleton in the file (not "its decoder, but ..."): the
    reason is kept, but another family's refusal, if any got further, is the one to read first."""


class NoFamilyFits(LayoutError):
    """No family's inference maps the file. `reasons` holds each family's refusal (family name -> message), those
    whose skeleton was found first; the message lists them all."""

    def __init__(self, message: str, reasons: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.reasons: dict[str, str] = dict(reasons or {})


def _refuse(msg: str, names: Iterable[str]) -> LayoutError:
    shown = ", ".join(f"'{n}'" for n in list(names)[:8])
    return LayoutError(f"{msg}: {shown}" if shown else msg)


class _Solver:
    """Shared state: the tensors not yet given a role, and the assignments so far."""

    def __init__(self, raw: RawFile):
        self.raw = raw
        self.src = str(raw.path)
        self.all = {}
        for n, t in raw.tensors.items():
            toks = tokens(n)
            self.all[n] = _T(n, tuple(int(d) for d in t.shape), toks, stem(toks))
        self.excluded = sorted(n for n, t in self.all.items() if _is_encoder(t.toks))
        self.free = {n: t for n, t in self.all.items() if n not in self.excluded}
        self.out: dict[str, Assignment] = {}

    def take(self, role: str, t: _T | str, how: str) -> None:
        name = t if isinstance(t, str) else t.name
        if role in self.out:
            raise _refuse(f"role '{role}' matched twice", [self.out[role].tensor, name])
        self.free.pop(name)
        self.out[role] = Assignment(role, name, how)

    def find(self, pred: Callable[[_T], bool]) -> list[_T]:
        return sorted((t for t in self.free.values() if pred(t)), key=lambda t: natural_key(t.name))


def _is_encoder(toks: tuple[str, ...]) -> bool:
    """An encoder tensor: an encoder word among the first three tokens, before any decoder word."""
    for t in toks[:3]:
        if t in ("dec", "decoder", "decodeur", "dekodierer", "decodificador"):
            return False
        if t in _W["encoder"]:
            return True
    return False


# --- assignment by enumeration ------------------------------------------------------------------------
Score = tuple[float, float, float]


def _solve(
    items: list[_T],
    roles: list[str],
    ok: Callable[[dict[str, _T]], bool],
    score: Callable[[dict[str, _T]], Score],
    what: str,
    fits: Callable[[str, _T, dict[str, _T]], bool] | None = None,
) -> dict[str, tuple[_T, str]]:
    """Give each role one of `items` (as many items as roles): among the assignments `ok` accepts, the
    best by (name structure, role words, numbers in names). Returns {role: (tensor, how)}; refuses,
    naming the tensors, when no assignment fits or the best is not unique. `fits(role, tensor, partial)`,
    when given, rules out a pairing as soon as the roles before it are given (a bias of the wrong length,
    a key whose width is not the query's), so that fewer assignments are tried."""
    if len(items) != len(roles):
        raise _refuse(f"{what}: expected {len(roles)} tensors, found {len(items)}", [t.name for t in items])
    cands = []
    for a in _assignments(items, roles, fits):
        if ok(a):
            cands.append((score(a), a))
    if not cands:
        raise _refuse(f"{what}: these tensors do not have the shapes of {', '.join(roles)}", [t.name for t in items])
    best = max(s for s, _ in cands)
    top = [a for s, a in cands if s == best]
    if len(top) > 1:
        differ = sorted({top[0][r].name for r in roles if any(a[r] is not top[0][r] for a in top[1:])})
        raise _refuse(f"{what}: cannot tell these tensors apart (same shape, no distinguishing name)", differ)
    win = top[0]
    out: dict[str, tuple[_T, str]] = {}
    near = {depth: [a for s, a in cands if s[:depth] == best[:depth]] for depth in (0, 1, 2)}
    for r in roles:
        tier = 3
        for depth, how in ((0, "shape"), (1, "name"), (2, "name")):
            rivals = near[depth]
            if all(a[r] is win[r] for a in rivals):
                tier = depth
                out[r] = (win[r], how)
                break
        if tier == 3:
            out[r] = (win[r], "order")
    return out


def _assignments(
    items: list[_T], roles: list[str], fits: Callable[[str, _T, dict[str, _T]], bool] | None
) -> list[dict[str, _T]]:
    """Every way of giving each role one of `items` that `fits` allows, role by role in order."""
    if fits is None:
        return [dict(zip(roles, perm, strict=True)) for perm in itertools.permutations(items)]
    out: list[dict[str, _T]] = []
    partial: dict[str, _T] = {}
    free = list(items)

    def walk(k: int) -> None:
        if k == len(roles):
            out.append(dict(partial))
            return
        r = roles[k]
        for t in list(free):
            if fits(r, t, partial):
                partial[r] = t
                free.remove(t)
                walk(k + 1)
                free.append(t)
                del partial[r]

    walk(0)
    return out


def _suffixes(group: list[_T]) -> dict[str, tuple[str, ...]]:
    """Each tensor's tokens after the prefix the whole group shares (the part that tells them apart)."""
    if not group:
        return {}
    n = min(lcp(group[0].toks, t.toks) for t in group) if len(group) > 1 else max(len(group[0].toks) - 2, 0)
    return {t.name: t.toks[n:] for t in group}


def _words(a: dict[str, _T], kinds: dict[str, str], suffix: dict[str, tuple[str, ...]] | None = None) -> float:
    """Role-word score of an assignment: one point per tensor whose distinguishing tokens carry a word
    of its role, minus one per tensor carrying a word of a rival role only."""
    suffix = suffix or _suffixes(list(a.values()))
    rivals = set(kinds.values())
    return sum(_word(kinds[r], rivals, suffix[t.name]) for r, t in a.items())


def _word(kind: str, rivals: set[str], toks: tuple[str, ...]) -> float:
    """One tensor's role-word score: 1 with a word of its kind, -1 with a word of a rival kind only."""
    if has_word(kind, toks):
        return 1
    return -1 if any(has_word(o, toks) for o in rivals - {kind}) else 0


# --- vectors ------------------------------------------------------------------------------------------
@dataclass
class _Owner:
    """A part of the decoder with its matrices already known and the vectors it still needs."""

    key: str
    tensors: list[_T]
    sizes: dict[int, int]  # vector length -> how many
    min_lcp: int = 0
    optional: bool = False
    got: list[_T] = field(default_factory=list)

    def affinity(self, v: _T) -> int:
        """How close a vector's name sits to this part's tensors: the common prefix of their module names
        (stems), so that `bias_conv1` sits as close to `conv1_weight` as `conv1_bias` does."""
        return max((lcp(v.stem, t.stem) for t in self.tensors), default=0)


def _attach(s: _Solver, owners: list[_Owner]) -> list[_T]:
    """Give each vector to the part whose tensors' names share the longest prefix with it. Vectors that
    tie between parts, or that a full part does not need, stay unattached; parts still short of
    vectors then take the unattached ones of their length when that leaves no choice."""
    vecs = [t for t in s.free.values() if len(t.shape) == 1]
    left: list[_T] = []
    for v in vecs:
        cand = [(o.affinity(v), o) for o in owners if o.tensors and o.sizes.get(v.shape[0])]
        cand = [(a, o) for a, o in cand if a >= o.min_lcp]
        if not cand:
            left.append(v)
            continue
        best = max(a for a, _ in cand)
        top = [o for a, o in cand if a == best]
        if len(top) == 1 and best > 0:
            top[0].got.append(v)
        else:
            left.append(v)
    for o in owners:
        for size, need in o.sizes.items():
            mine = [v for v in o.got if v.shape[0] == size]
            if len(mine) <= need:
                continue
            mine.sort(key=lambda v: -o.affinity(v))
            if o.affinity(mine[need - 1]) == o.affinity(mine[need]):
                tied = [v.name for v in mine if o.affinity(v) == o.affinity(mine[need])]
                raise _refuse(f"{o.key}: more vectors of length {size} than it needs, and no way to choose", tied)
            for v in mine[need:]:
                o.got.remove(v)
                left.append(v)
    for size in sorted({v.shape[0] for v in left}):
        short = [o for o in owners if not o.optional and o.sizes.get(size, 0) > sum(v.shape[0] == size for v in o.got)]
        pool = [v for v in left if v.shape[0] == size]
        if len(short) == 1:
            o = short[0]
            need = o.sizes[size] - sum(v.shape[0] == size for v in o.got)
            if len(pool) == need:
                o.got.extend(pool)
                left = [v for v in left if v not in pool]
            elif len(pool) > need:
                raise _refuse(
                    f"{o.key}: needs {need} more vector(s) of length {size}; several could be", [v.name for v in pool]
                )
    return left


def _sizes(*pairs: tuple[int, int]) -> dict[int, int]:
    """{length: count} from (length, count) pairs whose lengths may coincide (hidden == latent)."""
    d: dict[int, int] = defaultdict(int)
    for k, v in pairs:
        d[k] += v
    return dict(d)



# --- head count ---------------------------------------------------------------------------------------
def heads_from_metadata(meta: dict[str, Any], q_width: int) -> tuple[int, str] | None:
    """A head count under a key the standard aliases do not know (`model.nombre_tetes`, `kopf_anzahl`):
    an integer under a key with a head word and no width word (dim, size, length) that divides the
    attention width; decoder keys first, encoder keys never."""
    hits = []
    for key, value in meta.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            continue
        toks = tokens(key)
        if not has_word("heads", toks) or has_word("encoder", toks):
            continue
        if any(t in ("dim", "size", "len", "length", "width", "kv", "key", "value", "taille") for t in toks):
            continue
        if q_width % value:
            continue
        hits.append((0 if any("dec" in t for t in toks) else 1, key, value))
    if not hits:
        return None
    hits.sort()
    return hits[0][2], hits[0][1]


# --- entry points -------------------------------------------------------------------------------------
def proposal_of(
    raw: Any, name: str | None, assignments: list[Assignment], family: str, hp: Any, overrides: dict[str, Any],
    unused: list[str], notes: list[str], heads: str, sizes: Callable[[Any], str],
    transforms: dict[str, tuple[str, str]] | None = None,
) -> Proposal:
    """A family's inference result as a Proposal: the layout map of its assignments (one literal rule a tensor, the
    value transforms the tensors need, the hyperparameters given), and the map's notes (how each tensor was decided,
    then the family's own notes)."""
    lm = LayoutMap(
        name=name or f"inferred-{Path(str(raw.path)).stem}",
        rules=[(re.compile(re.escape(a.tensor)), a.role) for a in assignments],
        description=f"inferred from the structure of {Path(str(raw.path)).name}",
        source="",
        family=family,
        transforms=[(re.compile(re.escape(t)), spec) for t, spec in (transforms or {}).items()],
    )
    lm.hparams = dict(overrides)
    p = Proposal(lm, assignments, hp, dict(overrides), unused, notes, heads, sizes=sizes)
    c = p.counts()
    lm.notes = [
        f"{len(assignments)} tensors: {c['shape']} decided by shape (certain), {c['name']} by name, "
        f"{c['order']} by numbers in the names",
        *notes,
    ]
    return p


def apply_overrides(hp: Any, values: dict[str, Any], source: str = "") -> Any:
    """Hyperparameters that neither shapes nor metadata tell (the head count above all), given by the user or
    by a layout map's `[hparams]` table, applied as the family of `hp` allows (its files half's
    `apply_overrides`); a family without any refuses every override."""
    from kzlab.formats.family_files import files_half

    if not values:
        return hp
    apply = getattr(files_half(hp), "apply_overrides", None)
    if apply is None:
        raise InvalidOptionError(
            f"{source}: hyperparameter(s) {', '.join(sorted(values))} cannot be overridden for this decoder "
            "(tensor shapes and metadata decide them all)"
        )
    return apply(hp, values, source)


def infer_layout(
    raw: RawFile | str | Path, name: str | None = None, hparams: dict[str, Any] | None = None
) -> Proposal:
    """Propose a layout map for a decoder file from its structure: each family's inference is tried, the
    family the file's `general.architecture` names first, then the others in registry order; the first that
    maps the file wins. `hparams` are hyperparameters the file cannot say (a GroupNorm's group count, a head count),
    given by the user: applied as the family allows and written in the map's `[hparams]`, so that the map alone
    loads the file as it was meant. When no family maps the file, `NoFamilyFits` gives every family's reason,
    those of the families whose skeleton the file has first (a refusal that names tensors it cannot tell apart
    says more than another family's "not mine")."""
    from kzlab.formats.family_files import all_halves

    if not isinstance(raw, RawFile):
        from kzlab.formats.reader import read

        raw = read(raw)
    halves = all_halves()
    halves.sort(key=lambda ah: raw.architecture not in ah[0].architectures)  # stable: the labelled family first
    refused: list[tuple[str, KzlabError]] = []
    for arch, fh in halves:
        try:
            proposal = fh.infer_layout(raw, name)
        except KzlabError as e:
            refused.append((arch.name, e))
            continue
        return _given(proposal, hparams, str(raw.path)) if hparams else proposal
    raise _no_family(str(raw.path), raw.architecture, refused)


def _given(p: Proposal, values: dict[str, Any], src: str) -> Proposal:
    """The proposal with the user's hyperparameters applied (checked by the family) and recorded in its map."""
    p.hparams = apply_overrides(p.hparams, values, src)
    p.overrides.update(values)
    p.layout.hparams.update(values)
    stale = tuple(f"no {k} in the metadata" for k in values)
    if "num_heads" in values or "head_dim" in values:
        p.heads = "given"
        stale += ("no head count",)
    p.notes = [n for n in p.notes if not n.startswith(stale)]
    p.layout.notes = [n for n in p.layout.notes if not n.startswith(stale)]
    said = ", ".join(f"{k}={v}" for k, v in values.items())
    p.notes.append(f"given, not read from the file: {said} (in the map's [hparams])")
    p.layout.notes.append(f"given, not read from the file: {said}")
    return p


def _no_family(src: str, architecture: str | None, refused: list[tuple[str, KzlabError]]) -> KzlabError:
    """The refusal when no family maps a file: one line per family with its reason, the families whose skeleton
    the file has first (their refusal is the one to act on), the file's path said once. With one family
    registered, its own refusal."""
    if len(refused) == 1:
        return refused[0][1]
    near = [(f, e) for f, e in refused if not isinstance(e, NotThisFamily)]
    far = [(f, e) for f, e in refused if isinstance(e, NotThisFamily)]
    reasons = {f: str(e).removeprefix(f"{src}: ") for f, e in near + far}
    label = f"general.architecture {architecture!r}" if architecture is not None else "no general.architecture"
    lines = [f"{src}: no decoder family maps this file by its structure ({label}); each family's reason"
             + (", those whose skeleton the file has first:" if near else ":")]
    lines += [f"  {f} (its skeleton is in the file): {reasons[f]}" for f, _ in near]
    lines += [f"  {f}: {reasons[f]}" for f, _ in far]
    return NoFamilyFits("\n".join(lines), reasons)


__all__ = [
    "Assignment", "NoFamilyFits", "NotThisFamily", "Proposal", "apply_overrides", "has_word", "heads_from_metadata",
    "infer_layout", "lcp", "natural_key", "stem", "tokens",
]
