"""Layout inference asks every decoder family and says what each one found.

- codec.cpp's WavTokenizer file (tests/data/codeccpp-wavtokenizer: AdaLayerNorm tables [4, C], the codebook beside
  its running statistics, no hyperparameter key) is inferred with its own names and with the words that say where a
  tensor sits made up (tests/test_mimi_infer.py's renaming: separators, numbers and metadata kept, order shuffled).
  `kzlab layout infer --hparam group_norm_groups=16 -o map.toml` writes a map that decodes it as PyTorch does with
  16 groups (reference-g16.npz, every stage >= 70 dB as tests/test_codeccpp_wavtokenizer.py holds the built-in map),
  bit for bit as the built-in map does.
- A file no family maps is refused with every family's reason, one line each, the families whose skeleton the file
  has first; the API keeps them in `NoFamilyFits.reasons`.
- With every word made up, what nothing but a word tells apart is refused naming those tensors: a ConvNeXt block's
  AdaLayerNorm scale and shift tables (one shape), and in codec.cpp's Mimi file a layer's q, k, v and o (each held
  under two names, the two copies of the decoder's transformer) through every entry: the family's inference, the
  generic one, the loader and `kzlab layout infer`.
"""

from __future__ import annotations

import re
from pathlib import Path

import infer_schemes as S
import numpy as np
import pytest
from conftest import TINY, stage_snrs
from test_mimi_infer import CODECCPP, no_words, rewrite, role_words

import kzlab
from kzlab.arch import family_names
from kzlab.audio import snr_db
from kzlab.cli import main
from kzlab.errors import InvalidOptionError, LayoutError
from kzlab.formats import reader
from kzlab.formats.infer import NoFamilyFits, infer_layout
from kzlab.formats.layout import get_layout

DATA = Path(__file__).parent / "data"
WT = DATA / "codeccpp-wavtokenizer" / "codeccpp-wavtokenizer-tiny-f32.gguf"
REF16 = DATA / "codeccpp-wavtokenizer" / "reference-g16.npz"
#: the file's AdaLayerNorm tables (the built-in map reads them through row:bandwidth_id)
TABLES = re.compile(r"dec\.bb\.(cnx\.\d+\.)?norm\.(scale|shift)\.weight")


@pytest.fixture(scope="module")
def ref16() -> dict[str, np.ndarray]:
    return dict(np.load(REF16))


def _builtin_mapping() -> dict[str, str]:
    mapping, _ = get_layout("codeccpp-wavtokenizer").apply(reader.read(WT).tensors)
    return mapping


def _decode(path: Path, **kw) -> np.ndarray:
    with kzlab.load(path, backend="cpu", sched=False, threads=2, **kw) as d:
        return d.decode(dict(np.load(REF16))["codes"])


# ---- codec.cpp's WavTokenizer file -----------------------------------------------------------------------------
def test_the_codeccpp_wavtokenizer_file_is_inferred_as_its_built_in_map_reads_it():
    """Every role the built-in map reads, from the same tensor; the eight tables through row 0; the codebook's
    running statistics, the iSTFT window and the converter's kernels unused; GroupNorm's group count said unknown."""
    p = infer_layout(WT)
    assert p.layout.family == "wavtokenizer-dec"
    assert {a.role: a.tensor for a in p.assignments} == _builtin_mapping()
    tables = sorted(n for n in reader.read(WT).tensors if TABLES.fullmatch(n))
    assert len(tables) == 8
    assert sorted(rx.pattern for rx, spec in p.layout.transforms if spec == ("row", "bandwidth_id")) == sorted(
        re.escape(n) for n in tables)
    assert len(p.layout.transforms) == 8
    assert set(p.unused) == {"vq.vq.layers.0._codebook.embed_avg", "vq.vq.layers.0._codebook.cluster_size",
                             "vq.vq.layers.0._codebook.inited", "dec.head.istft.window", "wt.decode.kernel",
                             "wt.encode.kernel"}
    notes = "\n".join(p.notes)
    assert "AdaLayerNorm tables [4, 64]" in notes and "0..3" in notes
    assert "'vq.vq.layers.0._codebook.embed_avg': its name with words added" in notes
    assert "no group_norm_groups in the metadata: using 32" in notes
    assert p.hparams.bandwidth_id == 0 and p.layout.hparams == {}


def test_the_map_layout_infer_writes_decodes_it_as_pytorch_with_16_groups(tmp_path, ref16, capsys):
    """`kzlab layout infer FILE --hparam group_norm_groups=16 -o map.toml`: the map carries the group count and the
    row transforms; `kzlab decode FILE --layout map.toml` matches PyTorch's 16-group decode, and through the API
    every stage does (>= 70 dB), bit for bit as the built-in map with the group count given."""
    toml = tmp_path / "map.toml"
    assert main(["layout", "infer", str(WT), "--hparam", "group_norm_groups=16", "-o", str(toml)]) == 0
    out = capsys.readouterr().out
    assert "value transforms (8)" in out and "given, not read from the file: group_norm_groups=16" in out
    assert "no group_norm_groups in the metadata" not in out
    text = toml.read_text()
    assert "[hparams]\ngroup_norm_groups = 16" in text and text.count('"row:bandwidth_id"') == 8
    codes, npy = tmp_path / "codes.npy", tmp_path / "wav.npy"
    np.save(codes, ref16["codes"])
    assert main(["decode", str(WT), "--layout", str(toml), "--codes", str(codes), "-o", str(tmp_path / "o.wav"),
                 "--npy", str(npy), "--backend", "cpu", "--threads", "2"]) == 0
    assert snr_db(np.load(npy), ref16["wav"]) >= 70.0
    with kzlab.load(WT, layout=str(toml), backend="cpu", sched=False, threads=2) as d:
        assert d.model.hparams.group_norm_groups == 16 and d.model.hparams_given == {"group_norm_groups": 16}
        low = {k: round(v, 1) for k, v in stage_snrs(d, ref16, skip=("codes", "posnet"), every=True).items()
               if v < 70.0}
    assert not low, f"stages under 70 dB: {low}"
    assert np.array_equal(_decode(WT, layout=str(toml)), _decode(WT, hparams={"group_norm_groups": 16}))


def test_a_hyperparameter_the_family_does_not_take_is_refused_by_layout_infer():
    with pytest.raises(InvalidOptionError, match="num_heads"):
        infer_layout(WT, hparams={"num_heads": 4})
    assert main(["layout", "infer", str(WT), "--hparam", "group_norm_groups=5"]) == 2  # 64 channels


def test_the_file_with_its_place_words_made_up_is_inferred_and_decodes(tmp_path, ref16):
    """The words that say where a tensor sits (dec, bb, cnx, pos_net, vq, codebook, embed, fln, head...) made up:
    the tables are told from the output norm by their shape, scale from shift by the words left (weight, shift),
    the codebook from its running statistic by the name structure; loaded through inference with the group count
    given, the file decodes as PyTorch does."""
    path = tmp_path / "renamed.gguf"
    names = rewrite(WT, path, role_words, seed=5)
    assert not any(re.search(r"\b(dec|bb|cnx|pos_net|vq|embed|fln|head)\b", n) for n in names.values())
    p = infer_layout(path)
    assert {a.role: a.tensor for a in p.assignments} == {r: names[t] for r, t in _builtin_mapping().items()}
    assert len(p.layout.transforms) == 8
    assert names["vq.vq.layers.0._codebook.embed_avg"] in p.unused
    with pytest.warns(UserWarning, match="unknown tensor names"):
        wav = _decode(path, hparams={"group_norm_groups": 16})
    assert snr_db(wav, ref16["wav"]) >= 70.0


def test_with_every_word_made_up_the_adalayernorm_tables_are_refused_named(tmp_path):
    """With no word left, a ConvNeXt block's scale and shift tables have one shape and nothing that differs: the
    refusal names the two, as the WavTokenizer family's reason, listed first although the registry and the file's
    label (codec.cpp's `wavtokenizer_large`, no family's) put the Qwen3-TTS family first."""
    path = tmp_path / "nowords.gguf"
    names = rewrite(WT, path, no_words, seed=9)
    with pytest.raises(NoFamilyFits) as e:
        infer_layout(path)
    reason = e.value.reasons["wavtokenizer-dec"]
    assert "cannot tell these tensors apart" in reason
    pair = {names[f"dec.bb.cnx.0.norm.{w}.weight"] for w in ("scale", "shift")}
    assert set(re.findall(r"'([^']+)'", reason)) == pair
    lines = str(e.value).splitlines()
    assert family_names()[0] != "wavtokenizer-dec" and reader.read(path).architecture == "wavtokenizer_large"
    assert lines[1].startswith("  wavtokenizer-dec (its skeleton is in the file): ")
    assert all("not a" in ln and "(its skeleton" not in ln for ln in lines[2:])


# ---- no family --------------------------------------------------------------------------------------------------
def _foreign(path: Path) -> Path:
    """A small language-model-like GGUF: embeddings, one attention layer, an output matrix."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    rng = np.random.default_rng(0)
    for name, shape in (("token_embd.weight", (32, 8)), ("blk.0.attn_q.weight", (8, 8)),
                        ("blk.0.attn_k.weight", (8, 8)), ("blk.0.attn_norm.weight", (8,)),
                        ("output.weight", (32, 8))):
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_file_no_family_maps_gets_every_family_reason(tmp_path, capsys):
    """One line per family with its own reason, in the API (`reasons`), `kzlab layout infer` and the loader."""
    path = _foreign(tmp_path / "lm.gguf")
    with pytest.raises(NoFamilyFits) as e:
        infer_layout(path)
    assert set(e.value.reasons) == set(family_names())
    assert all("not a" in r and "decoder as far as the shapes tell" in r for r in e.value.reasons.values())
    lines = str(e.value).splitlines()
    assert "no decoder family maps this file" in lines[0] and "general.architecture 'llama'" in lines[0]
    assert sorted(ln.split(":")[0].strip() for ln in lines[1:]) == sorted(family_names())
    assert main(["layout", "infer", str(path)]) == 2
    err = capsys.readouterr().err
    for family, reason in e.value.reasons.items():
        assert f"  {family}: {reason}" in err
    with pytest.raises(LayoutError) as loaded:
        kzlab.load_model(path)
    assert "is a 'llama' file" in str(loaded.value)
    assert all(r in str(loaded.value) for r in e.value.reasons.values())


def test_the_family_whose_skeleton_is_there_comes_first(tmp_path):
    """The tiny Qwen3-TTS decoder with a layer's gate and up named alike (tests/test_infer.py's case): its family
    found its skeleton and refuses naming the two; the others' skeletons are not in the file (their reasons follow,
    each "not a ... decoder")."""
    weights = S.canonical_weights(TINY / "qwentts-tokenizer-f32.gguf", "qwentts")
    alike = {"tfm.blk.1.ffn_gate.weight": "m.t.h.1.fa", "tfm.blk.1.ffn_up.weight": "m.t.h.1.fb"}
    path = S.write_scheme(weights, lambda r: alike.get(r) or S.KURZ(r), tmp_path / "alike.gguf", "f32", {})
    with pytest.raises(NoFamilyFits) as e:
        infer_layout(path)
    lines = str(e.value).splitlines()
    assert lines[1].startswith("  qwen3-tts-12hz (its skeleton is in the file): transformer layer 1")
    assert all(n in lines[1] for n in alike.values())
    assert all("(its skeleton" not in ln for ln in lines[2:]) and len(lines) == 1 + len(family_names())


# ---- codec.cpp's Mimi file with every word made up -------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 7, 21])
def test_the_renamed_codeccpp_mimi_file_is_refused_naming_a_layers_four_attention_matrices(tmp_path, capsys, seed):
    """q, k, v and o of a layer have one shape [64, 64] and, every word made up, nothing else apart: refused with
    the four named (of one copy of the decoder's transformer), by the generic inference, the loader and the CLI,
    the Mimi family's reason first and the others' after it."""
    path = tmp_path / "nowords.gguf"
    names = rewrite(CODECCPP, path, no_words, seed=seed)
    back = {v: k for k, v in names.items()}
    with pytest.raises(NoFamilyFits) as e:
        infer_layout(path)
    reason = e.value.reasons["mimi"]
    assert re.search(r"transformer layer 0 .*cannot tell these tensors apart", reason)
    four = [back[n] for n in re.findall(r"'([^']+)'", reason.split("cannot tell", 1)[1])]
    layers = ["dec.transformer.blocks.0.self_attn.{}_proj.w", "dtr.l0.attn.{}_proj.w"]
    assert any(sorted(four) == sorted(x.format(w) for w in "qkvo") for x in layers), four
    raw = reader.read(path)
    assert len({tuple(raw.tensors[names[n]].shape) for n in four}) == 1
    lines = str(e.value).splitlines()
    assert lines[1].startswith("  mimi (its skeleton is in the file): ") and len(lines) == 1 + len(family_names())
    with pytest.raises(LayoutError) as loaded:
        kzlab.load_model(path)
    assert all(names[n] in str(loaded.value) for n in four)
    assert main(["layout", "infer", str(path)]) == 2
    err = capsys.readouterr().err
    assert all(names[n] in err for n in four) and all(f"  {f}" in err for f in family_names())
