"""Structural inference over random naming schemes (tests/infer_schemes.py `random_scheme`): words from every
language of the vocabulary, any separator, side/kind/position words joined to a vector's module word with
`_`, `-`, camelCase or as segments of their own, before or after it. Each scheme must be mapped exactly
right, or refused with a LayoutError that names (at least) two tensors of one shape that it cannot tell
apart; a scheme mapped wrong fails the test. One scheme in twenty names some sibling vectors with tags no
vocabulary knows (`rename.blind`): those must be refused.

KZLAB_INFER_SCHEMES sets the number of schemes (default 60; `make fuzz` runs 2,000). Inference reads only
names, shapes and metadata, so each scheme is handed to it as an in-memory file; the tests in
tests/test_infer.py write schemes as GGUF files and decode them.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from pathlib import Path

import infer_schemes as S
import numpy as np
import pytest
from conftest import TINY

from kzlab.errors import LayoutError
from kzlab.formats.infer import NoFamilyFits, infer_layout
from kzlab.formats.reader import RawFile, RawTensor

N_SCHEMES = int(os.environ.get("KZLAB_INFER_SCHEMES", "60"))


@pytest.fixture(scope="module")
def sources():
    return {
        "divided": S.canonical_weights(TINY / "qwentts-tokenizer-f32.gguf", "qwentts"),
        "usage": S.canonical_weights(TINY / "hf", "hf"),
    }


def _file(weights: dict[str, np.ndarray], rename: S.Rename, seed: int) -> RawFile:
    """The scheme as a file in memory: the names and shapes a GGUF file would give the reader."""
    tensors = {}
    for role, a in weights.items():
        name = rename(role)
        tensors[name] = RawTensor(name, "F32", tuple(int(d) for d in a.shape), a)
    return RawFile(Path(f"scheme-{seed}.gguf"), "gguf", {"x.n_head": 4}, tensors, 0)


def check_scheme(weights: dict[str, np.ndarray], seed: int) -> tuple[str, str]:
    """("mapped", ""), ("refused", message) or ("wrong", what differs) for one random scheme; a scheme
    with undecidable names (`blind`) that is mapped at all counts as wrong (it was a guess)."""
    rename = S.random_scheme(seed)
    truth = {role: rename(role) for role in weights}
    assert len(set(truth.values())) == len(truth), f"seed {seed}: the generator gave two tensors one name"
    raw = _file(weights, rename, seed)
    try:
        got = {a.role: a.tensor for a in infer_layout(raw).assignments}
    except LayoutError as e:
        # the decoder's own family's reason: the other families' (not theirs) may name tensors of theirs
        msg = e.reasons.get("qwen3-tts-12hz", str(e)) if isinstance(e, NoFamilyFits) else str(e)
        named = [n for n in re.findall(r"'([^']*)'", msg) if n in raw.tensors]
        shapes = Counter(raw.tensors[n].shape for n in set(named))
        assert len(set(named)) >= 2 and max(shapes.values()) >= 2, (
            f"seed {seed}: refused without naming two tensors of one shape that cannot be told apart: {msg}"
        )
        return "refused", msg
    if rename.blind:
        return "wrong", f"seed {seed}: mapped although its {rename.blind} vectors carry no distinguishing name"
    if got == truth:
        return "mapped", ""
    diff = {r: (got.get(r), truth[r]) for r in truth if got.get(r) != truth[r]}
    return "wrong", f"seed {seed}: {len(diff)} roles mapped wrong, e.g. {dict(list(diff.items())[:4])}"


def test_random_schemes_mapped_exactly_or_refused(sources, capsys):
    counts: Counter[str] = Counter()
    wrong: list[str] = []
    refused: list[str] = []
    t0 = time.perf_counter()
    for seed in range(N_SCHEMES):
        verdict, why = check_scheme(sources["usage" if seed % 2 else "divided"], seed)
        counts[verdict] += 1
        if verdict == "wrong":
            wrong.append(why)
        elif verdict == "refused":
            blind = S.random_scheme(seed).blind
            refused.append(f"seed {seed} ({f'{blind} vectors blinded' if blind else 'names carry the words'}): {why}")
    blinded = sum(1 for seed in range(N_SCHEMES) if S.random_scheme(seed).blind)
    line = (
        f"random schemes: {N_SCHEMES}: {counts['mapped']} mapped exactly, {counts['refused']} refused "
        f"({blinded} of them blinded on purpose), {counts['wrong']} wrong ({time.perf_counter() - t0:.1f} s)"
    )
    with capsys.disabled():
        print("\n" + line + "".join(f"\n  refused {r}" for r in refused[:5]))
    assert not wrong, line + "\n" + "\n".join(wrong[:10])
    assert counts["mapped"] + counts["refused"] == N_SCHEMES
