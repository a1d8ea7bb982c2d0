"""WAV input and output (soundfile), float32 at the decoder's 24 kHz."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kzlab.errors import InvalidInputError


def write_wav(path: str | Path, wav: np.ndarray, sample_rate: int = 24000) -> Path:
    import soundfile as sf

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(p), np.asarray(wav, dtype=np.float32), sample_rate, subtype="FLOAT")
    return p


def read_wav(path: str | Path, sample_rate: int | None = 24000) -> tuple[np.ndarray, int]:
    """Mono float32 samples and the file's rate; refuses a rate other than `sample_rate` (no resampling)."""
    import soundfile as sf

    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"{p}: no such audio file")
    try:
        data, sr = sf.read(str(p), dtype="float32", always_2d=True)
    except Exception as e:
        raise InvalidInputError(f"{p}: cannot read audio: {e}") from None
    if sample_rate is not None and sr != sample_rate:
        raise InvalidInputError(f"{p}: sample rate {sr} Hz; kzlab expects {sample_rate} Hz")
    return data.mean(axis=1).astype(np.float32), sr


def wav_bytes(wav: np.ndarray, sample_rate: int = 24000, subtype: str = "PCM_16") -> bytes:
    """Samples as a WAV file in memory (for inline players: 16-bit PCM is half the size of float and plenty
    for listening). Samples outside [-1, 1] are clipped, as the decoder's own output is."""
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.clip(np.asarray(wav, dtype=np.float32), -1, 1), sample_rate, format="WAV", subtype=subtype)
    return buf.getvalue()


def wav_length(data: bytes) -> int:
    """Number of samples in WAV bytes (e.g. what an Audio widget holds)."""
    import io

    import soundfile as sf

    return int(sf.info(io.BytesIO(data)).frames)


def snr_db(out, ref) -> float:
    """SNR of `out` against `ref` over ref's length, in dB, in float64 (inf when they are equal, -inf when `ref` is
    silent and `out` is not: no division by zero)."""
    o = np.asarray(out, dtype=np.float64).reshape(-1)[: np.size(ref)]
    r = np.asarray(ref, dtype=np.float64).reshape(-1)
    err = float(np.sum((o - r) ** 2))
    if err == 0:
        return float("inf")
    power = float(np.sum(r**2))
    return float(10 * np.log10(power / err)) if power > 0 else float("-inf")


def snr_text(db: float) -> str:
    """`exact` for an exact match, else `52.3 dB`."""
    return "exact" if db == float("inf") else f"{db:.1f} dB"
