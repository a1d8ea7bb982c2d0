"""Mimi's layout inference (kzlab.arch.mimi.infer) on files whose tensor names say nothing of where a tensor sits.

codec.cpp's file (tests/data/codeccpp-mimi) and llama.cpp's PocketTTS mmproj (tests/data/pockettts-tiny) are
rewritten here (fuzz_driver.GGUF, as tests/test_infer.py rewrites files) with the words of their tensor names
replaced by made-up ones (the same made-up word wherever a word recurs; separators and numbers kept; tensor order
shuffled; metadata kept). Words are all such a file takes away: what is left is the tensors' shapes, values and
counts and the tree their names make. Two degrees:

- `role_words`: the words the inference vocabulary gives a role within a module (q, k, v, o, weight, bias, norm,
  scale, attention, MLP, in, out, pre, post: kzlab.formats.infer) stay; every word that says where a tensor
  sits (decoder, encoder, transformer, quantizer, flow, speaker, copies) is made up. The decoder must then be told
  apart from the encoder, the second copies, the flow LM and the speaker encoder by structure, and decode through
  the inferred map as the upstream reference does (F32 >= 70 dB; the mmproj keeps its convs F16: >= 40 dB).
- `no_words`: every word made up. A layer's q, k, v and o then have one shape and nothing else that differs
  (their values are alike in kind): inference must refuse, naming them, not guess. CrispASR's PocketTTS file
  stacks q, k and v in one matrix (taken in PyTorch's order), and its convs teach the file's own words for
  weight and bias: it decodes with every word made up, F16 as its converter writes it and F32 (the same converter
  with its dtype rule replaced, tests/data/pockettts-tiny/crispasr_f32.py) at >= 70 dB through the map
  `kzlab layout infer` writes.
"""

from __future__ import annotations

import random
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_driver import GGUF

import kzlab
from kzlab.audio import snr_db
from kzlab.cli import main
from kzlab.errors import LayoutError
from kzlab.formats import reader
from kzlab.formats.infer import _W, Proposal, has_word, infer_layout
from kzlab.formats.layout import get_layout
from kzlab.formats.reader import RawFile
from kzlab.model.model import Model, to_f32

DATA = Path(__file__).parent / "data"
CODECCPP = DATA / "codeccpp-mimi" / "codeccpp-mimi-tiny-f32.gguf"
MMPROJ = DATA / "pockettts-tiny" / "mmproj-pockettts-tiny-f32.gguf"
CRISPASR = DATA / "pockettts-tiny" / "crispasr-pockettts-tiny-f16.gguf"
#: the same converter with every tensor kept F32 (tests/data/pockettts-tiny/crispasr_f32.py)
CRISPASR_F32 = DATA / "pockettts-tiny" / "crispasr-pockettts-tiny-f32.gguf"
HF = DATA / "mimi-tiny" / "hf"

#: the kinds of word that say a tensor's role within its module, not where the module sits
ROLE_KINDS = ("q", "k", "v", "o", "gate", "up", "down", "weight", "bias", "norm", "scale", "attn", "ffn", "pre",
              "post", "in", "out")


def role_words(word: str) -> bool:
    return any(has_word(k, (word,)) for k in ROLE_KINDS)


def no_words(word: str) -> bool:
    return False


def made_up(names: list[str], keep: Callable[[str], bool], seed: int = 0) -> dict[str, str]:
    """Each name with every run of letters that `keep` refuses replaced by a made-up word, one per word (a word
    that recurs gets the same one), none a word of the inference vocabulary; separators and digits kept."""
    rnd = random.Random(seed)
    table: dict[str, str] = {}

    def word(w: str) -> str:
        if keep(w.lower()):
            return w
        if w not in table:
            while True:
                cand = "".join(rnd.choice("bdfgjkmprstvz") + rnd.choice("aeiou") for _ in range(rnd.randint(2, 3)))
                if cand not in table.values() and not any(has_word(k, (cand,)) for k in _W):
                    break
            table[w] = cand
        return table[w]

    return {n: re.sub(r"[A-Za-z]+", lambda m: word(m.group()), n) for n in names}


def rewrite(src: Path, out: Path, keep: Callable[[str], bool], drop: str = "", meta: str = "",
            seed: int = 0) -> dict[str, str]:
    """A copy of a GGUF with its tensors renamed by `made_up` and shuffled; tensors whose names match `drop` left
    out, metadata keys matching `meta` left out (general.* always kept). Returns old name -> new name."""
    g = GGUF.read(src)
    if drop:
        g.tensors = [t for t in g.tensors if not re.search(drop, t[0])]
    if meta:
        g.kvs = [kv for kv in g.kvs if kv[0].startswith("general.") or not re.search(meta, kv[0])]
    names = made_up([t[0] for t in g.tensors], keep, seed)
    for t in g.tensors:
        t[0] = names[t[0]]
    random.Random(seed + 1).shuffle(g.tensors)
    g.write(out)
    return names


@pytest.fixture(scope="module")
def mref():
    return dict(np.load(DATA / "mimi-tiny" / "reference.npz"))


@pytest.fixture(scope="module")
def pref():
    return dict(np.load(DATA / "pockettts-tiny" / "reference.npz"))


@pytest.fixture(scope="module")
def latents():
    return np.load(DATA / "pockettts-tiny" / "latents.npy")


def _inferred(path: Path, **kw: Any) -> Model:
    """The model loaded through inference (the load's warning must say so)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = kzlab.load_model(path, **kw)
    said = [str(w.message) for w in caught]
    assert any("unknown tensor names" in w for w in said), said
    assert m.family == "mimi" and m.layout.startswith("inferred-")
    return m


def _values(raw: RawFile, name: str) -> np.ndarray:
    t = raw.tensors[name]
    return to_f32(t.type, t.data, t.shape)


def _same_as_the_built_in_map(
    proposal: Proposal, path: Path, source: Path, builtin: str, names: dict[str, str]
) -> None:
    """Every role the built-in map reads from the original file gets a tensor of the same values (a copy of it is
    as good: the decode cannot tell them apart), and no other role is mapped."""
    want, _ = get_layout(builtin).apply(reader.read(source).tensors)
    got = {a.role: a.tensor for a in proposal.assignments}
    assert set(got) == set(want)
    raw_src, raw_new = reader.read(source), reader.read(path)
    for role, name in want.items():
        if got[role] != names[name]:
            assert np.array_equal(_values(raw_new, got[role]), _values(raw_src, name)), role


# ---- names that carry no place ---------------------------------------------------------------------------------
def test_codeccpp_file_with_made_up_names_decodes_as_transformers(tmp_path, mref):
    """codec.cpp's file: the encoder (mirror shapes), the dense downsample (the upsample's shape), the
    decoder's second copies (transformer, residual units), the codebooks stored twice, the converter's resampling
    kernels: the decoder is found by structure, decodes at >= 70 dB, and the proposal says what it passed over."""
    path = tmp_path / "renamed.gguf"
    names = rewrite(CODECCPP, path, role_words)
    assert not any(re.search(r"\b(dec|enc|dtr|etr|layers|cb|codebook|mimi)\b", n) for n in names.values())
    p = infer_layout(path)
    _same_as_the_built_in_map(p, path, CODECCPP, "codeccpp-mimi", names)
    assert p.layout.family == "mimi" and p.heads == "metadata"
    notes = "\n".join(p.notes)
    assert f"not {names['dn.cv.w']}: of that shape, but a real conv" in notes
    assert "also stored with the same values" in notes and names["etr.l0.attn.k_proj.w"] in notes
    assert "(divided by their usage counts): the same values" in notes
    assert "codec.cpp's (codec.*)" in notes and "rope_interleaved=0" in notes and "gelu_tanh=0" in notes
    m = _inferred(path)
    hp = m.hparams
    assert (hp.input, hp.num_quantizers, hp.num_semantic, hp.hidden, hp.num_layers, hp.num_heads) == (
        "codes", 32, 1, 64, 2, 4)
    assert (hp.ratios, hp.upsample_stride, hp.context) == ((8, 6, 5, 4), 2, 250)
    assert (hp.rope_interleaved, hp.gelu_tanh) == (0, 0)
    with kzlab.Decoder(m) as dec:
        wav = dec.decode(mref["codes"])
    assert snr_db(wav, mref["wav"]) >= 70


def test_pockettts_mmproj_with_made_up_names_decodes_as_pockettts(tmp_path, pref, latents):
    """llama.cpp's mmproj: the flow LM and the speaker encoder (its transformer has the decoder's width, its SEANet
    the decoder's shapes mirrored) are passed over; the latents' std and mean are told apart by their values; RoPE's
    pairing and GELU's form come from the runtime the metadata names (pocket-tts's: interleaved, tanh)."""
    path = tmp_path / "renamed.gguf"
    names = rewrite(MMPROJ, path, role_words, seed=3)
    p = infer_layout(path)
    _same_as_the_built_in_map(p, path, MMPROJ, "llamacpp-pockettts", names)
    notes = "\n".join(p.notes)
    assert "told apart by their values" in notes and names["a.blk.0.attn_k.weight"] in notes
    assert "llama.cpp's PocketTTS" in notes and "rope_interleaved=1" in notes and "gelu_tanh=1" in notes
    m = _inferred(path)
    hp = m.hparams
    assert (hp.input, hp.latent_dim, hp.hidden, hp.num_heads, hp.context) == ("latent", 32, 128, 2, 250)
    assert (hp.upsample_stride, hp.ratios, hp.rope_interleaved, hp.gelu_tanh) == (16, (6, 5, 4), 1, 1)
    with kzlab.Decoder(m) as dec:
        wav = dec.decode(latents)
    assert snr_db(wav, pref["wav"]) >= 40


def test_what_no_tensor_and_no_metadata_says_is_assumed_and_said(tmp_path, pref, latents):
    """The mmproj without its clip.* keys: no head count, no runtime named. The proposal says it assumed the heads
    and pocket-tts's RoPE pairing and GELU form (a decoder of latents); given the head count, the file decodes."""
    path = tmp_path / "bare.gguf"
    rewrite(MMPROJ, path, role_words, meta=r"^clip\.", seed=5)
    p = infer_layout(path)
    notes = "\n".join(p.notes)
    assert p.heads == "assumed" and "no head count in the metadata: assumed 2 heads of 64" in notes
    assert "RoPE's pairing (rotate-half or interleaved) cannot be told" in notes
    assert "assumed pocket-tts's" in notes and "--hparam rope_interleaved=0" in notes
    assert "assumed" in p.summary()
    m = _inferred(path, hparams={"num_heads": 2})
    assert (m.hparams.num_heads, m.hparams.rope_interleaved, m.hparams.gelu_tanh) == (2, 1, 1)
    with kzlab.Decoder(m) as dec:
        assert snr_db(dec.decode(latents), pref["wav"]) >= 40
    # a decoder of codes with no runtime named: transformers' RoPE and GELU assumed, and said
    codes = tmp_path / "bare-codes.gguf"
    rewrite(CODECCPP, codes, role_words, meta=r"^codec\.")
    p = infer_layout(codes)
    notes = "\n".join(p.notes)
    assert "assumed transformers' (rotate-half, exact erf GELU" in notes and "--hparam rope_interleaved=1" in notes
    assert p.hparams.rope_interleaved == 0 and p.heads == "assumed"


def test_crispasr_file_with_no_word_left_decodes_as_pockettts(tmp_path, pref, latents):
    """CrispASR's file with every word made up: q, k and v stacked in one matrix leave nothing to tell apart but
    their order (PyTorch's, said in the notes); the words that end its convs' weights and biases (told apart by
    shape) tell its norms' weights from their biases; the numbers tell attention's norm and scale from the MLP's."""
    path = tmp_path / "nowords.gguf"
    names = rewrite(CRISPASR, path, no_words, seed=13)
    p = infer_layout(path)
    _same_as_the_built_in_map(p, path, CRISPASR, "crispasr-pockettts", names)
    notes = "\n".join(p.notes)
    assert "taken in that order (PyTorch's in_proj)" in notes and "read as weight and bias" in notes
    m = _inferred(path)
    with kzlab.Decoder(m) as dec:
        assert snr_db(dec.decode(latents), pref["wav"]) >= 40


def test_crispasr_f32_file_with_no_word_left_is_mapped_by_the_cli_and_decodes_as_pockettts(tmp_path, pref, latents,
                                                                                          capsys):
    """The F32 file of CrispASR's layout with every word made up: `kzlab layout infer` writes the map, and the file
    decodes through it as pocket-tts decodes the same weights (>= 70 dB; its own names give the same figure)."""
    path = tmp_path / "nowords.gguf"
    names = rewrite(CRISPASR_F32, path, no_words, seed=17)
    assert not any(re.search(r"[A-Za-z]", n) and re.search(r"\b(mimi|decoder|transformer|conv|weight|bias)\b", n)
                   for n in names.values())
    _same_as_the_built_in_map(infer_layout(path), path, CRISPASR_F32, "crispasr-pockettts", names)
    toml = tmp_path / "map.toml"
    assert main(["layout", "infer", str(path), "-o", str(toml)]) == 0
    m = kzlab.load_model(path, layout=str(toml))
    assert m.family == "mimi" and m.hparams.input == "latent"
    with kzlab.Decoder(m, backend="cpu", threads=1) as dec:
        blind = dec.decode(latents)
    with kzlab.load(CRISPASR_F32, backend="cpu", threads=1) as dec:
        named = dec.decode(latents)
    assert snr_db(blind, pref["wav"]) >= 70
    assert np.array_equal(blind, named)  # the same map, the same graph: the same bits


# ---- refusals ----------------------------------------------------------------------------------------------------
def test_names_with_no_word_left_are_refused_naming_what_cannot_be_told_apart(tmp_path):
    """With every word made up, the rest of the decoder is still found, but q, k, v and o of a layer have one shape
    and no name that differs: refused, naming the four."""
    from kzlab.arch.mimi.infer import infer_layout as mimi_infer

    for src, layer in ((CODECCPP, "dec.transformer.blocks.0.self_attn.{}_proj.w"),
                       (MMPROJ, "a.gen.wav.tfm.blk.0.attn_{}.weight")):
        path = tmp_path / f"nowords-{src.stem}.gguf"
        names = rewrite(src, path, no_words, seed=7)
        with pytest.raises(LayoutError, match="transformer layer 0.*cannot tell these tensors apart") as e:
            mimi_infer(path)
        for w in ("q", "k", "v", "out" if src == MMPROJ else "o"):
            assert names[layer.format(w)] in str(e.value)
    # the generic entry gives every family's reason, the Mimi family's (its skeleton is in the file) first
    first = r"no decoder family maps this file.*\n  mimi \(its skeleton is in the file\): .*cannot tell these tensors"
    with pytest.raises(LayoutError, match=first):
        infer_layout(tmp_path / f"nowords-{CODECCPP.stem}.gguf")


def test_two_transformers_equally_near_the_decoder_are_refused(tmp_path):
    """Without the second copy that sits under the decoder's prefix, codec.cpp's two transformers (the encoder's,
    the decoder's) have one shape and names that tie neither to the decoder: refused, naming both."""
    path = tmp_path / "two.gguf"
    names = rewrite(CODECCPP, path, role_words, drop=r"^dec\.transformer\.")
    with pytest.raises(LayoutError, match="cannot tell which is the decoder's") as e:
        infer_layout(path)
    assert names["dtr.l0.attn.k_proj.w"] in str(e.value) and names["etr.l0.attn.k_proj.w"] in str(e.value)


# ---- the map ------------------------------------------------------------------------------------------------------
def test_the_written_map_loads_with_its_transform_and_hyperparameters(tmp_path, mref, capsys):
    """`kzlab layout infer -o` writes the proposal as a map (the dense upsample's `diagonal` transform and the
    runtime's hyperparameters included) that loads the file as inference does."""
    path = tmp_path / "renamed.gguf"
    names = rewrite(CODECCPP, path, role_words, seed=11)
    toml = tmp_path / "map.toml"
    assert main(["layout", "infer", str(path), "-o", str(toml)]) == 0
    text = toml.read_text()
    assert f"'{re.escape(names['up.cv.w'])}' = \"diagonal\"" in text and "rope_interleaved = 0" in text
    m = kzlab.load_model(path, layout=str(toml))
    assert m.family == "mimi" and m.hparams.rope_interleaved == 0
    with kzlab.Decoder(m) as dec:
        assert snr_db(dec.decode(mref["codes"]), mref["wav"]) >= 70


@pytest.mark.parametrize("path, builtin", [(HF, "hf-mimi"), (MMPROJ, "llamacpp-pockettts"),
                                           (CRISPASR, "crispasr-pockettts")])
def test_files_with_their_own_names_are_mapped_as_their_built_in_maps(path, builtin):
    """Inference on the original files gives the built-in maps' mapping (CrispASR's stacked q, k, v included)."""
    from kzlab.arch.mimi.infer import infer_layout as mimi_infer

    p = mimi_infer(path)
    want, _ = get_layout(builtin).apply(reader.read(path).tensors)
    assert {a.role: a.tensor for a in p.assignments} == want
    split = {re.escape(n): ("split", "q,k,v") for n in want.values() if n.endswith("in_proj.weight")}
    assert {rx.pattern: spec for rx, spec in p.layout.transforms} == split
