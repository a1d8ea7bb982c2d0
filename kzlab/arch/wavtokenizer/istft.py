"""The inverse STFT of WavTokenizer's head, in numpy: what outetts' ISTFTHead + ISTFT(padding="same") compute.

1. magnitude exp(h[:n_fft/2+1]) clipped at 100, phase h[n_fft/2+1:], S = mag * (cos + i sin);
2. per frame a real inverse FFT of length n_fft with 1/n_fft scaling (bins 1..n_fft/2-1 count twice; the
   imaginary parts of bin 0 and of the Nyquist bin are ignored), as numpy.fft.irfft and torch.fft.irfft do;
3. the periodic Hann window; 4. overlap-add with the hop; 5. division by the overlap-added squared window, and
the (n_fft - hop) / 2 samples of 'same' padding cut from each end: T * hop samples.

llama.cpp's tts tool (tools/tts/tts.cpp, embd_to_audio, at cb295bf5) sums bins 0..n_fft/2 once and divides by
n_fft/2 + 1 instead: 25-31 dB from PyTorch's waveform. This follows PyTorch.
"""

from __future__ import annotations

import numpy as np

MAG_MAX = 100.0


def hann(n: int) -> np.ndarray:
    """The periodic Hann window (torch.hann_window(n))."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def istft(h: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """Head output h [n_fft + 2, T] -> waveform float32 [T * hop].

    Computed frame-major ([T, n_fft], each frame's samples contiguous) and in float32, as PyTorch computes it:
    the overlap-add is then n_fft / hop adds of whole [T, hop] blocks where n_fft is a multiple of the hop (4 at
    the shipped sizes, against T adds of one strided frame each), and numpy's float32 exp, sin, cos and FFT are
    vectorised where its float64 sin and cos are not (750 frames: 22 ms in float64 frame by frame, 6 ms so; the
    two agree to 137 dB on random heads). The window's overlap-added square is summed in float64."""
    nb = n_fft // 2 + 1
    T = h.shape[1]
    hf = np.ascontiguousarray(np.asarray(h, dtype=np.float32).T)  # [T, n_fft + 2]
    mag = np.minimum(np.exp(hf[:, :nb]), np.float32(MAG_MAX))
    ph = hf[:, nb : 2 * nb]
    spec = np.empty((T, nb), np.complex64)
    spec.real = mag * np.cos(ph)
    spec.imag = mag * np.sin(ph)
    w = hann(n_fft)
    frames = np.fft.irfft(spec, n=n_fft, axis=1)  # [T, n_fft]
    frames *= w.astype(np.float32)
    L = (T - 1) * hop + n_fft
    wsq = w * w
    if n_fft % hop == 0:
        reps = n_fft // hop
        Y = np.zeros((T + reps - 1, hop), np.float32)
        E = np.zeros((T + reps - 1, hop))
        for r in range(reps):
            Y[r : r + T] += frames[:, r * hop : (r + 1) * hop]
            E[r : r + T] += wsq[r * hop : (r + 1) * hop]
        y, env = Y.reshape(-1), E.reshape(-1)
    else:
        y, env = np.zeros(L, np.float32), np.zeros(L)
        for t in range(T):
            y[t * hop : t * hop + n_fft] += frames[t]
            env[t * hop : t * hop + n_fft] += wsq
    pad = (n_fft - hop) // 2
    return (y[pad : L - pad] / env[pad : L - pad].astype(np.float32)).astype(np.float32)


def basis(n_fft: int) -> np.ndarray:
    """The windowed inverse real DFT as one matrix [n_fft, n_fft + 2] (numpy order): frames = basis @ [Re; Im]
    of the n_fft/2 + 1 bins, the Hann window and 1/n_fft included (used by the in-graph iSTFT)."""
    nb = n_fft // 2 + 1
    n = np.arange(n_fft)[:, None]
    k = np.arange(nb)[None, :]
    c = np.full(nb, 2.0)
    c[0] = 1.0
    c[-1] = 1.0
    ang = 2 * np.pi * ((n * k) % n_fft) / n_fft
    cos = c * np.cos(ang) / n_fft
    sin = -c * np.sin(ang) / n_fft
    sin[:, 0] = 0.0
    sin[:, -1] = 0.0  # the imaginary parts of bin 0 and of the Nyquist bin are ignored
    w = hann(n_fft)[:, None]
    return np.ascontiguousarray(np.concatenate([cos, sin], axis=1) * w, dtype=np.float32)
