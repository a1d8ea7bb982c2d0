"""Invented naming schemes for the tiny decoder, to test structural inference on files no dialect knows.

Each scheme renames the canonical roles (`kzlab.model.roles`) with its own words (French, German,
Spanish, abbreviations), separators, numbering base and metadata keys, and writes the tiny fixture's
weights under those names with gguf-py, in a shuffled tensor order, with per-tensor types.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from kzlab.formats import reader
from kzlab.formats.layout import get_layout

Rename = Callable[[str], str]


def canonical_weights(source: Path, layout: str) -> dict[str, np.ndarray]:
    """The fixture's tensors under canonical roles, as float32 (usage tensors kept when the source has them)."""
    raw = reader.read(source)
    mapping, _ = get_layout(layout).apply(raw.tensors)
    return {role: np.asarray(raw.tensors[name].data, dtype=np.float32).copy() for role, name in mapping.items()}


def _table(rules: list[tuple[str, str | Callable[[re.Match], str]]]) -> Rename:
    """A rename function from (regex over the canonical role, replacement) pairs, first match wins."""
    compiled = [(re.compile(rx), rep) for rx, rep in rules]

    def rename(role: str) -> str:
        for rx, rep in compiled:
            m = rx.fullmatch(role)
            if m:
                return rep(m) if callable(rep) else m.expand(rep)
        raise KeyError(f"scheme has no name for role {role}")

    return rename


def _n(m: re.Match, g: int, shift: int = 0) -> str:
    return str(int(m.group(g)) + shift)


# French, '/' separators, decoder blocks numbered from 0, residual units from 1 (the README's example map)
FRANCAIS = _table(
    [
        (r"vq\.first\.codebook", "decodeur/quantif/semantique/livre"),
        (r"vq\.rest\.(\d+)\.codebook", r"decodeur/quantif/acoustique/\1/livre"),
        (r"vq\.first\.usage", "decodeur/quantif/semantique/compte"),
        (r"vq\.rest\.(\d+)\.usage", r"decodeur/quantif/acoustique/\1/compte"),
        (r"vq\.first\.output_proj\.weight", "decodeur/quantif/semantique/projection"),
        (r"vq\.rest\.output_proj\.weight", "decodeur/quantif/acoustique/projection"),
        (r"pre_conv\.(weight|bias)", lambda m: "decodeur/preconv/" + _fr(m.group(1))),
        (
            r"tfm\.(input|output)_proj\.(weight|bias)",
            lambda m: (
                "decodeur/transformeur/" + {"input": "entree", "output": "sortie"}[m.group(1)] + "/" + _fr(m.group(2))
            ),
        ),
        (r"tfm\.norm\.weight", "decodeur/transformeur/norme"),
        (
            r"tfm\.blk\.(\d+)\.attn_(q|k|v|o)\.weight",
            lambda m: (
                f"decodeur/transformeur/couche/{m.group(1)}/attention/"
                + {"q": "requete", "k": "cle", "v": "valeur", "o": "sortie"}[m.group(2)]
            ),
        ),
        (
            r"tfm\.blk\.(\d+)\.ffn_(gate|up|down)\.weight",
            lambda m: (
                f"decodeur/transformeur/couche/{m.group(1)}/reseau/"
                + {"gate": "porte", "up": "haut", "down": "bas"}[m.group(2)]
            ),
        ),
        (r"tfm\.blk\.(\d+)\.attn_norm\.weight", r"decodeur/transformeur/couche/\1/norme_avant"),
        (r"tfm\.blk\.(\d+)\.ffn_norm\.weight", r"decodeur/transformeur/couche/\1/norme_apres"),
        (r"tfm\.blk\.(\d+)\.attn_scale", r"decodeur/transformeur/couche/\1/attention/echelle"),
        (r"tfm\.blk\.(\d+)\.ffn_scale", r"decodeur/transformeur/couche/\1/reseau/echelle"),
        (
            r"up\.(\d+)\.(convt|dwconv|norm|pw1|pw2)\.(weight|bias)",
            lambda m: (
                f"decodeur/agrandir/{m.group(1)}/"
                + {
                    "convt": "transposee",
                    "dwconv": "profondeur",
                    "norm": "norme",
                    "pw1": "ponctuel1",
                    "pw2": "ponctuel2",
                }[m.group(2)]
                + "/"
                + _fr(m.group(3))
            ),
        ),
        (r"up\.(\d+)\.gamma", r"decodeur/agrandir/\1/echelle"),
        (r"dec\.0\.conv\.(weight|bias)", lambda m: "decodeur/entree/" + _fr(m.group(1))),
        (r"dec\.5\.snake\.(alpha|beta)", lambda m: "decodeur/sortie/activation/" + _fr(m.group(1))),
        (r"dec\.6\.conv\.(weight|bias)", lambda m: "decodeur/sortie/convolution/" + _fr(m.group(1))),
        (r"dec\.(\d+)\.snake\.(alpha|beta)", lambda m: f"decodeur/bloc/{_n(m, 1, -1)}/activation/" + _fr(m.group(2))),
        (r"dec\.(\d+)\.convt\.(weight|bias)", lambda m: f"decodeur/bloc/{_n(m, 1, -1)}/transposee/" + _fr(m.group(2))),
        (
            r"dec\.(\d+)\.res\.(\d+)\.(act1|act2|conv1|conv2)\.(alpha|beta|weight|bias)",
            lambda m: (
                f"decodeur/bloc/{_n(m, 1, -1)}/residu/{_n(m, 2, 1)}/"
                + {"act1": "activation1", "act2": "activation2", "conv1": "convolution1", "conv2": "convolution2"}[
                    m.group(3)
                ]
                + "/"
                + _fr(m.group(4))
            ),
        ),
    ]
)


def _fr(word: str) -> str:
    return {"weight": "poids", "bias": "biais", "alpha": "frequence", "beta": "amplitude"}[word]


# German, '-' separators and CamelCase, blocks from 0, units from 0, codebooks with usage counts
DEUTSCH = _table(
    [
        (r"vq\.first\.(codebook|usage)", lambda m: "Dek-Quant-Erster-" + _de(m.group(1))),
        (r"vq\.rest\.(\d+)\.(codebook|usage)", lambda m: f"Dek-Quant-Rest-{m.group(1)}-" + _de(m.group(2))),
        (r"vq\.first\.output_proj\.weight", "Dek-Quant-Erster-AusgabeProjektion"),
        (r"vq\.rest\.output_proj\.weight", "Dek-Quant-Rest-AusgabeProjektion"),
        (r"pre_conv\.(weight|bias)", lambda m: "Dek-VorFaltung-" + _de(m.group(1))),
        (r"tfm\.input_proj\.(weight|bias)", lambda m: "Dek-Trafo-EingangProj-" + _de(m.group(1))),
        (r"tfm\.output_proj\.(weight|bias)", lambda m: "Dek-Trafo-AusgangProj-" + _de(m.group(1))),
        (r"tfm\.norm\.weight", "Dek-Trafo-EndNorm"),
        (
            r"tfm\.blk\.(\d+)\.attn_(q|k|v|o)\.weight",
            lambda m: (
                f"Dek-Trafo-Schicht-{m.group(1)}-Aufmerksamkeit"
                + {"q": "Anfrage", "k": "Schluessel", "v": "Wert", "o": "Ausgabe"}[m.group(2)]
            ),
        ),
        (
            r"tfm\.blk\.(\d+)\.ffn_(gate|up|down)\.weight",
            lambda m: (
                f"Dek-Trafo-Schicht-{m.group(1)}-Mlp" + {"gate": "Tor", "up": "Hoch", "down": "Runter"}[m.group(2)]
            ),
        ),
        (r"tfm\.blk\.(\d+)\.attn_norm\.weight", r"Dek-Trafo-Schicht-\1-VorNorm"),
        (r"tfm\.blk\.(\d+)\.ffn_norm\.weight", r"Dek-Trafo-Schicht-\1-NachNorm"),
        (r"tfm\.blk\.(\d+)\.attn_scale", r"Dek-Trafo-Schicht-\1-AufmerksamkeitSkala"),
        (r"tfm\.blk\.(\d+)\.ffn_scale", r"Dek-Trafo-Schicht-\1-MlpSkala"),
        (
            r"up\.(\d+)\.(convt|dwconv|norm|pw1|pw2)\.(weight|bias)",
            lambda m: (
                f"Dek-Hoch-{m.group(1)}-"
                + {"convt": "TFaltung", "dwconv": "Tiefe", "norm": "Norm", "pw1": "Punkt1", "pw2": "Punkt2"}[m.group(2)]
                + _de(m.group(3))
            ),
        ),
        (r"up\.(\d+)\.gamma", r"Dek-Hoch-\1-Skala"),
        (r"dec\.0\.conv\.(weight|bias)", lambda m: "Dek-Eingang-Faltung" + _de(m.group(1))),
        (r"dec\.5\.snake\.(alpha|beta)", lambda m: "Dek-Ende-Schlange" + _de(m.group(1))),
        (r"dec\.6\.conv\.(weight|bias)", lambda m: "Dek-Ende-Faltung" + _de(m.group(1))),
        (r"dec\.(\d+)\.snake\.(alpha|beta)", lambda m: f"Dek-Block-{_n(m, 1, -1)}-Schlange" + _de(m.group(2))),
        (r"dec\.(\d+)\.convt\.(weight|bias)", lambda m: f"Dek-Block-{_n(m, 1, -1)}-TFaltung" + _de(m.group(2))),
        (
            r"dec\.(\d+)\.res\.(\d+)\.(act1|act2|conv1|conv2)\.(alpha|beta|weight|bias)",
            lambda m: (
                f"Dek-Block-{_n(m, 1, -1)}-Rest-{m.group(2)}-"
                + {"act1": "Schlange1", "act2": "Schlange2", "conv1": "Faltung1", "conv2": "Faltung2"}[m.group(3)]
                + _de(m.group(4))
            ),
        ),
    ]
)


def _de(word: str) -> str:
    return {
        "weight": "Gewicht",
        "bias": "Verschiebung",
        "alpha": "Frequenz",
        "beta": "Amplitude",
        "codebook": "Codebuch",
        "usage": "Nutzung",
    }[word]


# abbreviations, '.' and '_' separators, one codebook family numbered from 0, llama-style w1/w2/w3,
# ln1/ln2 and ls1/ls2 in each layer, s1/s2 snakes with a/b, blocks from 1
KURZ = _table(
    [
        (r"vq\.first\.codebook", "m.vq.0.cb"),
        (r"vq\.rest\.(\d+)\.codebook", lambda m: f"m.vq.{_n(m, 1, 1)}.cb"),
        (r"vq\.first\.output_proj\.weight", "m.vq.p0"),
        (r"vq\.rest\.output_proj\.weight", "m.vq.p1"),
        (r"pre_conv\.(weight|bias)", lambda m: "m.pc." + m.group(1)[0]),
        (r"tfm\.input_proj\.(weight|bias)", lambda m: "m.t.inp_" + m.group(1)[0]),
        (r"tfm\.output_proj\.(weight|bias)", lambda m: "m.t.out_" + m.group(1)[0]),
        (r"tfm\.norm\.weight", "m.t.ln_f"),
        (r"tfm\.blk\.(\d+)\.attn_(q|k|v|o)\.weight", r"m.t.h.\1.w\2"),
        (
            r"tfm\.blk\.(\d+)\.ffn_(gate|up|down)\.weight",
            lambda m: f"m.t.h.{m.group(1)}." + {"gate": "w1", "up": "w3", "down": "w2"}[m.group(2)],
        ),
        (r"tfm\.blk\.(\d+)\.attn_norm\.weight", r"m.t.h.\1.ln1"),
        (r"tfm\.blk\.(\d+)\.ffn_norm\.weight", r"m.t.h.\1.ln2"),
        (r"tfm\.blk\.(\d+)\.attn_scale", r"m.t.h.\1.ls1"),
        (r"tfm\.blk\.(\d+)\.ffn_scale", r"m.t.h.\1.ls2"),
        (
            r"up\.(\d+)\.(convt|dwconv|norm|pw1|pw2)\.(weight|bias)",
            lambda m: (
                f"m.u.{m.group(1)}."
                + {"convt": "ct", "dwconv": "dw", "norm": "ln", "pw1": "pw1", "pw2": "pw2"}[m.group(2)]
                + "_"
                + m.group(3)[0]
            ),
        ),
        (r"up\.(\d+)\.gamma", r"m.u.\1.gm"),
        (r"dec\.0\.conv\.(weight|bias)", lambda m: "m.d.in_" + m.group(1)[0]),
        (r"dec\.5\.snake\.(alpha|beta)", lambda m: "m.d.fin.s_" + m.group(1)[0]),
        (r"dec\.6\.conv\.(weight|bias)", lambda m: "m.d.fin.c_" + m.group(1)[0]),
        (r"dec\.(\d+)\.snake\.(alpha|beta)", lambda m: f"m.d.b.{m.group(1)}.s_" + m.group(2)[0]),
        (r"dec\.(\d+)\.convt\.(weight|bias)", lambda m: f"m.d.b.{m.group(1)}.ct_" + m.group(2)[0]),
        (
            r"dec\.(\d+)\.res\.(\d+)\.(act1|act2|conv1|conv2)\.(alpha|beta|weight|bias)",
            lambda m: (
                f"m.d.b.{m.group(1)}.r.{m.group(2)}."
                + {"act1": "s1", "act2": "s2", "conv1": "c1", "conv2": "c2"}[m.group(3)]
                + "_"
                + m.group(4)[0]
            ),
        ),
    ]
)

# Spanish, ':' separators, everything numbered from 1, usage counts, metadata keys in French
ESPANOL = _table(
    [
        (r"vq\.first\.(codebook|usage)", lambda m: "dec:cuantizador:1:" + _es(m.group(1))),
        (r"vq\.rest\.(\d+)\.(codebook|usage)", lambda m: f"dec:cuantizador:{_n(m, 1, 2)}:" + _es(m.group(2))),
        (
            r"vq\.(first|rest)\.output_proj\.weight",
            lambda m: "dec:cuantizador:proyeccion:" + {"first": "1", "rest": "2"}[m.group(1)],
        ),
        (r"pre_conv\.(weight|bias)", lambda m: "dec:preconv:" + _es(m.group(1))),
        (
            r"tfm\.(input|output)_proj\.(weight|bias)",
            lambda m: (
                "dec:transformador:" + {"input": "entrada", "output": "salida"}[m.group(1)] + ":" + _es(m.group(2))
            ),
        ),
        (r"tfm\.norm\.weight", "dec:transformador:normalizacion"),
        (
            r"tfm\.blk\.(\d+)\.attn_(q|k|v|o)\.weight",
            lambda m: (
                f"dec:transformador:capa:{_n(m, 1, 1)}:atencion:"
                + {"q": "consulta", "k": "clave", "v": "valor", "o": "salida"}[m.group(2)]
            ),
        ),
        (
            r"tfm\.blk\.(\d+)\.ffn_(gate|up|down)\.weight",
            lambda m: (
                f"dec:transformador:capa:{_n(m, 1, 1)}:ffn:"
                + {"gate": "puerta", "up": "arriba", "down": "abajo"}[m.group(2)]
            ),
        ),
        (
            r"tfm\.blk\.(\d+)\.(attn|ffn)_norm\.weight",
            lambda m: (
                f"dec:transformador:capa:{_n(m, 1, 1)}:" + {"attn": "atencion", "ffn": "ffn"}[m.group(2)] + ":norm"
            ),
        ),
        (
            r"tfm\.blk\.(\d+)\.(attn|ffn)_scale",
            lambda m: (
                f"dec:transformador:capa:{_n(m, 1, 1)}:" + {"attn": "atencion", "ffn": "ffn"}[m.group(2)] + ":escala"
            ),
        ),
        (
            r"up\.(\d+)\.(convt|dwconv|norm|pw1|pw2)\.(weight|bias)",
            lambda m: (
                f"dec:ampliar:{_n(m, 1, 1)}:"
                + {"convt": "transpuesta", "dwconv": "profunda", "norm": "norm", "pw1": "puntual1", "pw2": "puntual2"}[
                    m.group(2)
                ]
                + ":"
                + _es(m.group(3))
            ),
        ),
        (r"up\.(\d+)\.gamma", lambda m: f"dec:ampliar:{_n(m, 1, 1)}:escala"),
        (r"dec\.(\d+)\.conv\.(weight|bias)", lambda m: f"dec:bloque:{_n(m, 1, 1)}:conv:" + _es(m.group(2))),
        (r"dec\.(\d+)\.snake\.(alpha|beta)", lambda m: f"dec:bloque:{_n(m, 1, 1)}:serpiente:" + _es(m.group(2))),
        (r"dec\.(\d+)\.convt\.(weight|bias)", lambda m: f"dec:bloque:{_n(m, 1, 1)}:transpuesta:" + _es(m.group(2))),
        (
            r"dec\.(\d+)\.res\.(\d+)\.(act1|act2|conv1|conv2)\.(alpha|beta|weight|bias)",
            lambda m: (
                f"dec:bloque:{_n(m, 1, 1)}:residual:{_n(m, 2, 1)}:"
                + {"act1": "serpiente1", "act2": "serpiente2", "conv1": "conv1", "conv2": "conv2"}[m.group(3)]
                + ":"
                + _es(m.group(4))
            ),
        ),
    ]
)


def _es(word: str) -> str:
    return {
        "weight": "peso",
        "bias": "sesgo",
        "alpha": "frecuencia",
        "beta": "amplitud",
        "codebook": "libro",
        "usage": "uso",
    }[word]


TINY_META = {
    "num_heads": 4,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "sliding_window": 72,
}


def write_scheme(
    weights: dict[str, np.ndarray],
    rename: Rename,
    out: Path,
    dtypes: str = "f32",
    metadata: dict[str, object] | None = None,
    seed: int = 0,
) -> Path:
    """Write `weights` (canonical roles) under the scheme's names, in a shuffled order.

    dtypes: "f32"; "f16" (2-D and up in F16, vectors F32); "mixed" (codebooks F16, vectors F32, half of
    the tensors whose rows are blocks of 32 in Q8_0, the other 2-D and 3-D ones F16 or F32). `metadata` replaces all
    key/values (no `general.architecture` either) when given."""
    w = GGUFWriter(str(out), "kzlab-test")
    w.kv_data[0].clear()
    for k, v in (metadata or {}).items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_string(k, str(v))
    items = list(weights.items())
    rows32 = sorted(r for r, a in items if a.ndim >= 2 and a.shape[-1] % 32 == 0 and ".codebook" not in r)
    q8 = set(rows32[::2])
    random.Random(seed).shuffle(items)
    for n, (role, a) in enumerate(items):
        name = rename(role)
        if a.ndim <= 1 or dtypes == "f32":
            w.add_tensor(name, a.astype(np.float32))
        elif dtypes == "f16" or ".codebook" in role:
            w.add_tensor(name, a.astype(np.float16))
        elif role in q8:
            q = quantize(a.reshape(-1, a.shape[-1]), GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q.reshape(*a.shape[:-1], -1), raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, a.astype(np.float16 if n % 2 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


# --- random schemes: words, separators, numbering and nesting drawn from a seed --------------------------
_SYN = {
    "q": ["q", "query", "wq", "requete"],
    "k": ["k", "key", "wk", "clave"],
    "v": ["v", "value", "wv", "valor"],
    "o": ["o", "out", "wo", "output", "ausgabe"],
    "gate": ["gate", "w1", "porte", "tor"],
    "up": ["up", "w3", "haut", "hoch"],
    "down": ["down", "w2", "bas", "abajo"],
    "attn": ["attn", "attention", "self_attn", "sa"],
    "ffn": ["mlp", "ffn", "feed_forward", "ff"],
    "norm": ["norm", "ln", "rmsnorm", "norme"],
    "scale": ["scale", "ls", "layer_scale", "echelle"],
    "weight": ["weight", "w", "poids", ""],
    "bias": ["bias", "b", "biais"],
    "alpha": ["alpha", "a", "freq", "frequenz"],
    "beta": ["beta", "b", "amp", "magnitude"],
    "act": ["act{}", "snake{}", "activation{}", "s{}"],
    "conv": ["conv{}", "c{}", "faltung{}"],
    "convt": ["convt", "tconv", "transposee"],
    "dw": ["dwconv", "dw", "depthwise"],
    "pw": ["pwconv{}", "pw{}", "fc{}"],
    "gamma": ["gamma", "ls", "scale"],
    "in": ["input_proj", "in_proj", "proj_in", "entree"],
    "out": ["output_proj", "out_proj", "proj_out", "sortie"],
    "fnorm": ["norm", "final_norm", "ln_f", "norm_out"],
    "dec0": ["conv_in", "in_conv", "stem", "entree"],
    "snake_out": ["snake_out", "act_out", "final_act"],
    "conv_out": ["conv_out", "out_conv", "final_conv"],
    "quant": ["quantizer", "vq", "rvq", "quant"],
    "tfm": ["transformer", "pre_tfm", "xfmr"],
    "ups": ["upsample", "up", "agrandir"],
    "dec": ["decoder", "dec", "blocks", "vocoder"],
    "root": ["dec", "decoder", "net", "model", "codec"],
    "codebook": ["codebook", "embed", "cb", "livre"],
    "usage": ["usage", "cluster_usage", "counts"],
}

# words a transformer layer's norms and scales may carry beside their own: the side they belong to and their
# position, in every language of the inference vocabulary (kzlab/formats/infer.py)
_SIDE = {
    "attn": ["attn", "attention", "self_attn", "sa", "att", "aufmerksamkeit", "atencion", "attenzione"],
    "ffn": ["mlp", "ffn", "feed_forward", "ff", "feedforward", "reseau", "rete"],
}
_POS = {
    "pre": ["pre", "input", "before", "first", "avant", "vor", "erste", "primero", "antes", "prima"],
    "post": ["post", "after", "second", "apres", "nach", "zweite", "segundo", "despues", "dopo"],
}
#: how a word joins the one it qualifies: "_", "-", camelCase, or a name segment of its own
_JOIN = ["_", "-", "camel", "seg"]


def _camel(words: list[str]) -> str:
    subs = [s for w in words for s in re.split(r"[_-]", w) if s]
    return subs[0][0].lower() + subs[0][1:] + "".join(s[0].upper() + s[1:] for s in subs[1:])


class _Leaf:
    """How one family of names puts a module word and its qualifiers (side, position, kind) together: each
    qualifier before or after the module word, in a drawn order, joined in one of the `_JOIN` ways."""

    def __init__(self, rnd: random.Random | None, sep: str):
        self.sep = sep
        if rnd is None:  # the plain style: module word, then each qualifier as a segment of its own
            self.join, self.order, self.before = "seg", ["pos", "side", "kind"], set()
            return
        self.join = rnd.choice(_JOIN)
        self.order = rnd.sample(["pos", "side", "kind"], 3)
        self.before = {c for c in self.order if rnd.random() < 0.5}

    def words(self, *words: str) -> str:
        words_ = [w for w in words if w != ""]
        if self.join == "camel":
            return _camel(words_)
        return (self.sep if self.join == "seg" else self.join).join(words_)

    def __call__(self, module: str, **quals: str) -> str:
        q = [(c, quals[c]) for c in self.order if quals.get(c, "") != ""]
        seq = [w for c, w in q if c in self.before] + [module] + [w for c, w in q if c not in self.before]
        return self.words(*seq)


def random_scheme(seed: int, styles: bool = True) -> Rename:
    """A naming scheme drawn at random: the test of inference on names nobody chose with it in mind.

    With `styles`, the words that qualify a vector (the side of a transformer norm or scale and its
    position, weight/bias, alpha/beta) are joined to the module word with `_`, `-`, camelCase or as a
    segment of their own, before or after it; without, they follow it as segments of their own."""
    rnd = random.Random(seed)
    w = {k: rnd.choice(v) for k, v in _SYN.items()}
    sep = rnd.choice([".", "/", "-", ":", "|"])
    b0, u0, l0, s0, c0 = rnd.choice([0, 1]), rnd.choice([0, 1, 2]), rnd.choice([0, 1]), rnd.choice([0, 1]), 0
    one_family = rnd.random() < 0.5
    if one_family:
        c0 = rnd.choice([0, 1])
    norm_style = rnd.choice(["group", "position", "hf", "numbered"])
    scale_style = rnd.choice(["group", "numbered"])
    if w["beta"] == "b" and w["bias"] == "b":
        w["bias"] = "bias"
    plain = _Leaf(None, sep)
    vec = mat = snake = norm = scale = plain  # the leaf styles of biases, weights, snakes, norms and scales
    side = {"attn": w["attn"], "ffn": w["ffn"]}
    pos = {"pre": "pre", "post": "post"}
    scale_kind = ""
    if styles:
        vec, snake, norm, scale = (_Leaf(rnd, sep) for _ in range(4))
        mat = vec if rnd.random() < 0.5 else plain
        norm_style = rnd.choice(["side", "position", "both", "compound", "hf", "numbered"])
        scale_style = rnd.choice(["side", "both", "compound", "numbered"])
        if rnd.random() < 0.5:
            side = {s: rnd.choice(v) for s, v in _SIDE.items()}
        pos = {p: rnd.choice(v) for p, v in _POS.items()}
        scale_kind = rnd.choice(["", "", "scale", w["weight"]])
        # a compound is a position word right before a side word: "pre_attn" (attention), "pre_mlp" and
        # "post_attention" (the MLP's: after attention), "post_mlp"
        compound_ffn = rnd.choice([("post", "attn"), ("pre", "ffn"), ("post", "ffn")])
    # one scheme in twenty names one kind of sibling vectors with tags no vocabulary knows (`x`, `y`): the
    # transformer norms, the snakes' alpha and beta, or the upsampling norms' weight and bias. Nothing
    # tells those apart, so inference must refuse the scheme.
    blind = None
    if styles and rnd.random() < 0.05:
        blind = rnd.choice(["layer", "snake", "upnorm"])
        if blind == "snake":
            w["alpha"], w["beta"] = "x", "y"

    def j(*parts: object) -> str:
        return sep.join(str(p) for p in parts if p != "")

    def wb(kind: str) -> str:
        return w["weight"] if kind == "weight" else w["bias"]

    def kinded(module: str, kind: str) -> str:
        """A module's weight (a matrix or conv, in the matrices' style) or bias (in the vectors' style)."""
        return (mat if kind == "weight" else vec)(module, kind=wb(kind))

    def layer_vector(leaf: _Leaf, role_word: str, first: bool, style: str, kind: str) -> str:
        s, p = ("attn", "pre") if first else ("ffn", "post")
        if blind == "layer" and role_word == w["norm"]:
            return leaf(role_word, side="x" if first else "y", kind=kind)
        if style == "side":
            return leaf(role_word, side=side[s], kind=kind)
        if style == "position":
            return leaf(role_word, pos=pos[p], kind=kind)
        if style == "both":
            return leaf(role_word, side=side[s], pos=pos[p], kind=kind)
        if style == "compound":
            cp, cs = ("pre", "attn") if first else compound_ffn
            return leaf(role_word, side=leaf.words(pos[cp], side[cs]), kind=kind)
        if style == "numbered":
            return leaf(role_word, pos="1" if first else "2", kind=kind)
        # hf
        return leaf("input_layernorm" if first else "post_attention_layernorm", kind=kind)

    def name(role: str) -> str:
        p = role.split(".")
        R = w["root"]
        if p[0] == "vq":
            q = w["quant"]
            if p[-1] in ("codebook", "usage"):
                i = -1 if p[1] == "first" else int(p[2])
                leaf = w["codebook"] if p[-1] == "codebook" else w["usage"]
                if one_family:
                    return j(R, q, i + 1 + c0, leaf)
                return j(R, q, "first", leaf) if i < 0 else j(R, q, "rest", i, leaf)
            proj = {"first": "semantic", "rest": "acoustic"}[p[1]] if not one_family else {"first": 0, "rest": 1}[p[1]]
            return j(R, q, "out_proj", proj) if one_family else j(R, q, proj, "out_proj")
        if p[0] == "pre_conv":
            return j(R, kinded("pre_conv", p[1]))
        if p[0] == "tfm":
            t = w["tfm"]
            if p[1] in ("input_proj", "output_proj"):
                return j(R, t, kinded(w["in" if p[1] == "input_proj" else "out"], p[2]))
            if p[1] == "norm":
                return j(R, t, vec(w["fnorm"], kind=wb("weight")))
            i = int(p[2]) + l0
            leaf = p[3]
            if leaf in ("attn_norm", "ffn_norm"):
                first = leaf == "attn_norm"
                if not styles:
                    n = {
                        "group": f"{w['attn'] if first else w['ffn']}_{w['norm']}",
                        "position": f"{'pre' if first else 'post'}_{w['norm']}",
                        "hf": "input_layernorm" if first else "post_attention_layernorm",
                        "numbered": f"{w['norm']}{1 if first else 2}",
                    }[norm_style]
                    return j(R, t, "layers", i, n, wb("weight"))
                return j(R, t, "layers", i, layer_vector(norm, w["norm"], first, norm_style, wb("weight")))
            if leaf in ("attn_scale", "ffn_scale"):
                first = leaf == "attn_scale"
                if not styles:
                    grp = w["attn"] if first else w["ffn"]
                    n = f"{grp}_{w['scale']}" if scale_style == "group" else f"{w['scale']}{1 if first else 2}"
                    return j(R, t, "layers", i, n)
                return j(R, t, "layers", i, layer_vector(scale, w["scale"], first, scale_style, scale_kind))
            grp, sub = leaf.split("_")
            return j(R, t, "layers", i, w["attn"] if grp == "attn" else w["ffn"], kinded(w[sub], "weight"))
        if p[0] == "up":
            i = int(p[1]) + s0
            if p[2] == "gamma":
                return j(R, w["ups"], i, w["gamma"])
            mod = {"convt": w["convt"], "dwconv": w["dw"], "norm": w["norm"]}.get(p[2]) or w["pw"].format(p[2][-1])
            if p[2] == "norm":  # a vector, weight or bias
                return j(
                    R, w["ups"], i, vec(mod, kind={"weight": "x", "bias": "y"}[p[3]] if blind == "upnorm" else wb(p[3]))
                )
            return j(R, w["ups"], i, kinded(mod, p[3]))
        # decoder
        b = int(p[1])
        if b == 0:
            return j(R, w["dec"], kinded(w["dec0"], p[3]))
        if b == 5:
            return j(R, w["dec"], snake(w["snake_out"], kind=w[p[3]]))
        if b == 6:
            return j(R, w["dec"], kinded(w["conv_out"], p[3]))
        blk = b - 1 + b0
        if p[2] == "snake":
            return j(R, w["dec"], blk, snake("snake", kind=w[p[3]]))
        if p[2] == "convt":
            return j(R, w["dec"], blk, kinded(w["convt"], p[3]))
        unit = int(p[3]) + u0
        kind, n = p[4][:-1], p[4][-1]
        if kind == "act":
            return j(R, w["dec"], blk, "res", unit, snake(w["act"].format(n), kind=w[p[5]]))
        return j(R, w["dec"], blk, "res", unit, kinded(w["conv"].format(n), p[5]))

    name.blind = blind  # type: ignore[attr-defined]  # what the scheme leaves undecidable, if anything
    return name
