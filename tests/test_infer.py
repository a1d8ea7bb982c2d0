"""Issue: any decoder GGUF, whatever its tensor names: user layout maps, and structural inference.

The tiny fixture is rewritten under invented naming schemes (tests/infer_schemes.py): other words and
languages, other separators, numbering from 0 or 1, shuffled tensor order, mixed F32/F16/Q8_0, metadata
under unknown keys or none at all. Each must decode through an inferred map within the SNR bounds.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import infer_schemes as S
import numpy as np
import pytest
from conftest import FRAMES, SAMPLES, TINY, run_cli, snr_db
from fuzz_driver import GGUF

import kzlab
from kzlab.errors import InvalidOptionError, LayoutError
from kzlab.formats import reader
from kzlab.formats.infer import infer_layout, tokens
from kzlab.formats.layout import LayoutMap, get_layout
from kzlab.loader import load_model

# scheme -> (rename, weights source, dtypes, metadata, SNR bound)
SCHEMES = {
    "francais-f32": (S.FRANCAIS, "divided", "f32", {"modele.decodeur.num_attention_heads": 4}, 70),
    "deutsch-mixed": (S.DEUTSCH, "usage", "mixed", {"kz.dek.n_heads": 4, "kz.dek.rope_theta": 10000.0}, 30),
    "kurz-f16": (S.KURZ, "divided", "f16", {"m.n_head": 4}, 40),
    "kurz-mixed": (S.KURZ, "divided", "mixed", {"m.n_head": 4}, 30),
    "espanol-f16-no-metadata": (S.ESPANOL, "usage", "f16", {"mon.modele.nombre_tetes": 4}, 40),
}


@pytest.fixture(scope="module")
def sources():
    return {
        "divided": S.canonical_weights(TINY / "qwentts-tokenizer-f32.gguf", "qwentts"),
        "usage": S.canonical_weights(TINY / "hf", "hf"),
    }


@pytest.fixture(scope="module")
def scheme_files(sources, tmp_path_factory):
    d = tmp_path_factory.mktemp("schemes")
    out = {}
    for i, (tag, (rename, src, dtypes, meta, _)) in enumerate(SCHEMES.items()):
        out[tag] = S.write_scheme(sources[src], rename, d / f"{tag}.gguf", dtypes, meta, seed=i)
    return out


def _load(path, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dec = kzlab.load(path, **kw)
    return dec, [str(w.message) for w in caught]


@pytest.mark.parametrize("tag", list(SCHEMES))
def test_scheme_decodes_through_inferred_map(scheme_files, sources, ref, tag):
    rename, src, dtypes, _, bound = SCHEMES[tag]
    path = scheme_files[tag]
    proposal = infer_layout(path)
    truth = {role: rename(role) for role in sources[src]}
    got = {a.role: a.tensor for a in proposal.assignments}
    assert got == truth
    assert proposal.unused == []
    dec, warned = _load(path)
    with dec:
        assert dec.model.layout.startswith("inferred")
        assert any("layout inferred from structure" in n for n in dec.model.notes)
        assert any("unknown tensor names" in w for w in warned)
        assert dec.hparams.num_heads == 4 and dec.hparams.head_dim == 16
        if dtypes == "mixed":
            hist = dec.model.dtype_histogram()
            assert hist.get("Q8_0", 0) >= 5 and hist.get("F16", 0) >= 5 and hist.get("F32", 0) >= 5, hist
        wav = dec.decode(ref["codes"])
    assert snr_db(wav, ref["wav"]) >= bound


def test_proposal_says_how_each_role_was_decided(scheme_files):
    p = infer_layout(scheme_files["francais-f32"])
    how = {a.role: a for a in p.assignments}
    # unique shapes are certain; alpha/beta and q/k need words; residual units and codebooks numbers
    assert how["pre_conv.weight"].how == "shape" and how["pre_conv.weight"].certain
    assert how["dec.0.conv.weight"].how == "shape"
    assert how["dec.1.snake.alpha"].how == "name" and not how["dec.1.snake.alpha"].certain
    assert how["dec.5.snake.beta"].how == "name"
    assert how["dec.1.res.0.act1.alpha"].how == "order"  # act1 before act2: the numbers in the names
    assert how["tfm.blk.0.attn_q.weight"].how == "name"
    assert how["tfm.blk.0.ffn_gate.weight"].how == "name"
    assert how["dec.2.res.1.conv1.weight"].how == "order"
    assert how["vq.rest.3.codebook"].how == "order"
    assert set(p.counts()) == {"shape", "name", "order"} and sum(p.counts().values()) == len(p.assignments)
    assert re.match(r"\d+ tensors mapped \(\d+ by shape, \d+ by name, \d+ by order\)", p.summary())
    text = p.describe()
    assert "decodeur/bloc/0/residu/1/activation1/frequence" in text and "hyperparameters:" in text


@pytest.mark.parametrize(
    "path,layout",
    [
        (TINY / "qwentts-tokenizer-f32.gguf", "qwentts"),
        (TINY / "crispasr-tokenizer-f16.gguf", "crispasr"),
        (TINY / "hf", "hf"),
    ],
)
def test_inference_agrees_with_the_builtin_maps(path, layout):
    """The known dialects were not written with inference in mind: it must find what their maps say."""
    raw = reader.read(path)
    truth, _ = get_layout(layout).apply(raw.tensors)
    p = infer_layout(raw)
    assert {a.role: a.tensor for a in p.assignments} == truth


def test_heads_from_override_when_no_metadata_at_all(sources, tmp_path, ref):
    path = S.write_scheme(sources["usage"], S.ESPANOL, tmp_path / "bare.gguf", "f32", metadata=None)
    assert reader.read(path).metadata == {}
    p = infer_layout(path)
    assert any("no head count" in n for n in p.notes)
    assert "heads assumed" in p.summary()
    # given to inference, the head count is the map's (`kzlab layout infer --hparam num_heads=4`)
    given = infer_layout(path, hparams={"num_heads": 4})
    assert given.heads == "given" and "head count given" in given.summary()
    assert given.layout.hparams == {"num_heads": 4} and given.hparams.num_heads == 4
    assert not any("no head count" in n for n in given.notes + given.layout.notes)
    # without a head count the file still loads (heads of 64 assumed), and says so
    dec, warned = _load(path)
    with dec:
        assert dec.hparams.num_heads == 1
        assert any("heads assumed" in w for w in warned) and any("heads assumed" in n for n in dec.model.notes)
    dec, _ = _load(path, overrides={"num_heads": 4})
    with dec:
        assert (dec.hparams.num_heads, dec.hparams.head_dim, dec.hparams.num_kv_heads) == (4, 16, 4)
        assert snr_db(dec.decode(ref["codes"]), ref["wav"]) >= 70
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InvalidOptionError, match="num_heads"):
            load_model(path, overrides={"num_heads": 5})
        with pytest.raises(InvalidOptionError, match="latent_dim"):
            load_model(path, overrides={"latent_dim": 5})


def _readme_map() -> str:
    """The complete example map of the README's "Layout maps" section."""
    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Layout maps") :]
    return re.search(r"```toml\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize("src,dtypes,bound", [("divided", "f32", 70), ("usage", "f16", 40)])
def test_readme_map_decodes_the_french_scheme(sources, ref, tmp_path, src, dtypes, bound):
    """The README's map (regexes, {N+1} / {N-1}, optional usage rules, [hparams]) through the API and CLI."""
    m = tmp_path / "francais.toml"
    m.write_text(_readme_map(), encoding="utf-8")
    lm = LayoutMap.from_file(m)
    assert lm.name == "francais" and lm.hparams == {"num_heads": 4}
    path = S.write_scheme(sources[src], S.FRANCAIS, tmp_path / "fr.gguf", dtypes, {}, seed=3)
    dec, warned = _load(path, layout=str(m))
    with dec:
        assert dec.model.layout == "francais" and not any("unknown tensor names" in w for w in warned)
        assert dec.hparams.num_heads == 4
        assert snr_db(dec.decode(ref["codes"]), ref["wav"]) >= bound
    assert "layout      francais" in run_cli("info", str(path), "--layout", str(m)).stdout
    # a map that leaves a required role out is refused with the role's name
    broken = tmp_path / "broken.toml"
    broken.write_text(
        "\n".join(ln for ln in _readme_map().splitlines() if "transformeur/norme'" not in ln), encoding="utf-8"
    )
    with pytest.raises(kzlab.InvalidModelError, match="tfm.norm.weight"):
        load_model(path, layout=str(broken))


def test_map_round_trip_keeps_hparams(scheme_files, tmp_path):
    p = infer_layout(scheme_files["espanol-f16-no-metadata"])
    assert p.overrides == {"num_heads": 4}
    assert any("mon.modele.nombre_tetes" in n for n in p.notes)
    f = tmp_path / "m.toml"
    f.write_text(p.layout.to_toml(), encoding="utf-8")
    back = LayoutMap.from_file(f)
    assert back.hparams == {"num_heads": 4}
    assert [(r.pattern, t) for r, t in back.rules] == [(r.pattern, t) for r, t in p.layout.rules]
    with pytest.raises(LayoutError, match="hparams"):
        LayoutMap.from_dict({"tensors": {"a": "pre_conv.weight"}, "hparams": {"num_heads": "four"}})


def test_cli_infer_then_decode(sources, ref, tmp_path):
    """`kzlab layout infer FILE -o map.toml`, then `kzlab decode FILE --layout map.toml`, no hand edits; the
    file carries its head count only under a key no alias knows, so the map must carry it."""
    path = S.write_scheme(sources["usage"], S.ESPANOL, tmp_path / "es.gguf", "mixed", {"x.y.tetes": 4}, seed=7)
    m = tmp_path / "es.toml"
    out = run_cli("layout", "infer", str(path), "-o", str(m))
    assert "tensors mapped" in out.stdout and "[name" in out.stdout and "[shape]" in out.stdout
    assert "num_heads = 4" in m.read_text()
    codes = tmp_path / "codes.npy"
    np.save(codes, ref["codes"])
    wav, npy = tmp_path / "out.wav", tmp_path / "out.npy"
    run_cli("decode", str(path), "--layout", str(m), "--codes", str(codes), "-o", str(wav), "--npy", str(npy))
    assert snr_db(np.load(npy), ref["wav"]) >= 30


def test_cli_show_and_list(tmp_path):
    out = run_cli("layout", "list").stdout
    for name in ("qwentts", "qwen3tts-cpp", "crispasr", "hf"):
        assert name in out
    shown = run_cli("layout", "show", "crispasr").stdout
    assert "[tensors]" in shown and "codec" in shown
    f = tmp_path / "m.toml"
    f.write_text("[layout]\nname = 'x'\n[tensors]\n'a\\.b' = \"pre_conv.weight\"\n", encoding="utf-8")
    assert "pre_conv.weight" in run_cli("layout", "show", str(f)).stdout
    bad = run_cli("layout", "show", "no-such-map", check=False)
    assert bad.returncode == 2 and "unknown layout" in bad.stderr


def _renamed(rename, changes):
    return lambda role: changes.get(role) or rename(role)


def test_ambiguous_snake_pair_is_refused_naming_both(sources, tmp_path):
    names = {"dec.2.res.1.act2.alpha": "m.d.b.2.r.1.s2_x", "dec.2.res.1.act2.beta": "m.d.b.2.r.1.s2_y"}
    path = S.write_scheme(sources["divided"], _renamed(S.KURZ, names), tmp_path / "amb.gguf", "f32", {})
    with pytest.raises(LayoutError, match="cannot tell") as e:
        infer_layout(path)
    for n in names.values():
        assert n in str(e.value)
    with pytest.raises(LayoutError, match="s2_x"):
        kzlab.load(path)


def test_ambiguous_gate_up_is_refused_naming_both(sources, tmp_path):
    names = {"tfm.blk.1.ffn_gate.weight": "m.t.h.1.fa", "tfm.blk.1.ffn_up.weight": "m.t.h.1.fb"}
    path = S.write_scheme(sources["divided"], _renamed(S.KURZ, names), tmp_path / "amb.gguf", "f16", {})
    with pytest.raises(LayoutError, match="transformer layer 1") as e:
        infer_layout(path)
    for n in names.values():
        assert n in str(e.value)


def test_not_this_architecture(sources, tmp_path):
    w = {r: a for r, a in sources["divided"].items() if not r.startswith("vq.")}
    path = S.write_scheme(w, S.KURZ, tmp_path / "nocodebooks.gguf", "f32", {})
    with pytest.raises(LayoutError, match="not a Qwen3-TTS"):
        infer_layout(path)
    w = {r: a for r, a in sources["divided"].items() if r != "dec.3.res.2.conv1.weight"}
    path = S.write_scheme(w, S.KURZ, tmp_path / "short.gguf", "f32", {})
    with pytest.raises(LayoutError, match="block 3"):
        infer_layout(path)


def test_tokens():
    assert tokens("Dek-Trafo-Schicht-0-AufmerksamkeitAnfrage") == (
        "dek",
        "trafo",
        "schicht",
        "0",
        "aufmerksamkeit",
        "anfrage",
    )
    assert tokens("décodeur/tête:12.attn_q_w") == ("decodeur", "tete", "12", "attn", "q", "w")
    assert tokens("layers.0.normWAntes") == ("layers", "0", "norm", "w", "antes")
    assert tokens("l.1Ls-postAttentionLayernorm") == ("l", "1", "ls", "post", "attention", "layernorm")


@pytest.mark.parametrize(
    "attn_norm,ffn_norm,attn_scale,ffn_scale",
    [
        ("norm_attn", "norm_mlp", "ls_attn", "ls_mlp"),
        ("attn_norm", "ffn_norm", "attnScale", "mlpScale"),
        ("ln_attention", "ln_ffn", "attn-ls", "mlp-ls"),
        ("input_layernorm", "post_attention_layernorm", "ls1", "ls2"),
        ("pre_attn_ln", "pre_feedforward_ln", "scale_pre_attn", "scale_post_mlp"),
        ("normAufmerksamkeit", "normReseau", "skala.atencion", "skala.mlp"),
        ("w_norme_avant", "w_norme_apres", "echelle_attenzione", "echelle_rete"),
    ],
)
def test_side_words_inside_a_segment(sources, tmp_path, attn_norm, ffn_norm, attn_scale, ffn_scale):
    """A layer whose matrices carry no side word of their own (`m.t.h.0.wq`): only the words inside the
    norms' and scales' own segments tell attention's from the MLP's."""
    leaf = {"attn_norm.weight": attn_norm, "ffn_norm.weight": ffn_norm, "attn_scale": attn_scale}
    leaf["ffn_scale"] = ffn_scale

    def rename(role: str) -> str:
        m = re.fullmatch(r"tfm\.blk\.(\d+)\.(attn_norm\.weight|ffn_norm\.weight|attn_scale|ffn_scale)", role)
        return f"m.t.h.{m.group(1)}.{leaf[m.group(2)]}" if m else S.KURZ(role)

    path = S.write_scheme(sources["divided"], rename, tmp_path / "sides.gguf", "f32", {"m.n_head": 4})
    got = {a.role: a.tensor for a in infer_layout(path).assignments}
    assert got == {role: rename(role) for role in sources["divided"]}


@pytest.mark.parametrize("seed", range(1000, 1010))
def test_random_scheme_is_mapped_exactly(sources, tmp_path, seed):
    """Schemes drawn at random from words, separators and numbering: names no one chose for these tests."""
    rename = S.random_scheme(seed)
    src = sources["usage" if seed % 2 else "divided"]
    path = S.write_scheme(src, rename, tmp_path / "r.gguf", "f16", {"x.n_head": 4}, seed=seed)
    if rename.blind:  # some sibling vectors carry tags no vocabulary knows: nothing can tell them apart
        with pytest.raises(LayoutError, match="cannot tell"):
            infer_layout(path)
        return
    got = {a.role: a.tensor for a in infer_layout(path).assignments}
    assert got == {role: rename(role) for role in src}


@pytest.mark.parametrize("seed", [2000, 2001])
def test_random_scheme_decodes_mixed(sources, ref, tmp_path, seed):
    rename = S.random_scheme(seed)
    assert not rename.blind
    src = sources["usage" if seed % 2 else "divided"]
    path = S.write_scheme(src, rename, tmp_path / "r.gguf", "mixed", {"x.n_head": 4}, seed=seed)
    dec, _ = _load(path)
    with dec:
        assert dec.model.dtype_histogram().get("Q8_0", 0) >= 5
        assert snr_db(dec.decode(ref["codes"]), ref["wav"]) >= 30


@pytest.mark.parametrize(
    "label,says",
    [
        ("llama", "general.architecture 'llama' is not a codec decoder architecture"),
        ("qwen3tts_tokenizer", "general.architecture 'qwen3tts_tokenizer' is not one layout 'qwentts' accepts"),
        (None, "the file has no general.architecture"),
    ],
)
def test_wrong_architecture_label_loads_through_the_layout_its_names_match(tmp_path, ref, label, says):
    """A qwentts.cpp file relabelled (or unlabelled): its names are exactly the built-in map's, so it loads
    through that map, and the warning says what is wrong (the label), not "unknown tensor names"."""
    src = TINY / "qwentts-tokenizer-f32.gguf"
    g = GGUF.read(src)
    if label is None:
        g.kvs = [kv for kv in g.kvs if kv[0] != "general.architecture"]
    else:
        g.set_string("general.architecture", label)
    path = g.write(tmp_path / "relabelled.gguf")
    assert reader.read(path).architecture == label
    codes = np.ascontiguousarray(ref["codes"][:, :FRAMES], dtype=np.int32)
    dec, warned = _load(path, backend="cpu", threads=1)
    with dec:
        assert dec.model.layout == "qwentts"
        said = [w for w in warned if says in w]
        assert said and "the built-in layout 'qwentts'" in said[0], warned
        assert not any("unknown tensor names" in w for w in warned)
        assert any(says in n and "'qwentts'" in n for n in dec.model.notes), dec.model.notes
        wav = dec.decode(codes)
    with kzlab.load(src, backend="cpu", threads=1) as orig:
        assert np.array_equal(wav, orig.decode(codes))
    assert snr_db(wav, ref["wav"][:SAMPLES]) >= 70
    # without inference the file is refused, with the same explanation and the way to load it
    with pytest.raises(LayoutError, match="no known layout") as e:
        load_model(path, infer=False)
    assert says in str(e.value) and "layout='qwentts'" in str(e.value)


def test_foreign_label_with_unknown_names_says_both(tmp_path):
    """Names no map knows and a label that is not a codec decoder's: inferred, and the warning says both."""
    g = GGUF.read(TINY / "qwentts-tokenizer-f32.gguf").set_string("general.architecture", "llama")
    for t in g.tensors:
        t[0] = "blk_" + t[0].replace(".", "_")
    path = g.write(tmp_path / "renamed.gguf")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(path)
    warned = [str(w.message) for w in caught]
    assert model.layout.startswith("inferred")
    assert any("unknown tensor names" in w and "'llama' is not a codec decoder" in w for w in warned), warned
