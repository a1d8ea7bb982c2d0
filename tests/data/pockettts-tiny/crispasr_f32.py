"""CrispASR's PocketTTS converter with its one dtype rule replaced: every tensor F32.

CrispASR's `models/convert-pocket-tts-to-gguf.py` (commit 72d3c389) has no outtype option: `choose_dtype` writes
tensors of 512 elements or more as F16 (norms and scales aside). This runs that converter unchanged but for
`choose_dtype`, which here returns every tensor as the converter's own `to_f32` gives it, so that the file has
CrispASR's names, metadata and tensor order with the weights exactly as pocket-tts holds them:

    python crispasr_f32.py CONVERTER.py --input . --output-dir OUT --language tiny

(run from this directory, with pocket-tts 4.0.1's environment; writes OUT/pocket-tts-tiny-novc-f16.gguf, the
converter's fixed name, renamed by the caller to crispasr-pockettts-tiny-f32.gguf).
"""

import importlib.util
import sys

spec = importlib.util.spec_from_file_location("crispasr_convert", sys.argv[1])
conv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conv)
conv.choose_dtype = lambda name, shape, tensor: (conv.to_f32(tensor), conv.GGMLQuantizationType.F32)
sys.argv = [sys.argv[1]] + sys.argv[2:]
conv.main()
