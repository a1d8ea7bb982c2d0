"""A Qwen3-TTS-12Hz "Base" model directory around a speech tokenizer, for llama.cpp's converter.

llama.cpp's `convert_hf_to_gguf.py DIR --mmproj` (0c1e5709, conversion/qwen3tts.py) reads a whole model
directory: the talker with its code predictor, the speaker encoder, and `speech_tokenizer/`. Only the speech
tokenizer's decoder is compared here, so the rest is tiny and random (llama.cpp hard-codes the decoder's sizes
but reads the code predictor's and the speaker encoder's from the file). The model classes are qwen-tts 0.1.1's
own (qwen_tts/core/models/), imported from its wheel without the package's __init__ (librosa and the inference
tokenizer are stubbed: they are used only at inference time). The speech tokenizer is copied unchanged: the
tiny fixture's (tests/data/qwen3-tts-12hz-tiny/hf) or the full-size random checkpoint that
shared/tools/make_reference.py builds, whose reference.npz is the decoder's truth.

Usage (a Python with torch, transformers and safetensors):
    python benchmarks/llamacpp_model_dir.py QWEN_TTS_WHEEL TOKENIZER_HF_DIR OUT_DIR
    HF_HUB_OFFLINE=1 python LLAMA_CPP/convert_hf_to_gguf.py OUT_DIR --mmproj --outtype f32 --outfile mmproj.gguf
Writes OUT_DIR/config.json, OUT_DIR/model.safetensors (talker.*, speaker_encoder.*),
OUT_DIR/speech_tokenizer/{config.json,model.safetensors}. Deterministic (seed 1234).
"""
from __future__ import annotations

import importlib.machinery
import json
import shutil
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any

import numpy as np


def import_model_classes(wheel: Path) -> tuple[Any, Any]:
    """qwen-tts's configuration and model classes from its wheel, without the package's __init__."""
    root = Path(tempfile.mkdtemp(prefix="qwen_tts_models_"))
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if n.startswith("qwen_tts/core/models/"):
                z.extract(n, root)
    (root / "qwen_tts" / "__init__.py").touch()
    (root / "qwen_tts" / "core" / "__init__.py").touch()
    (root / "qwen_tts" / "core" / "models" / "__init__.py").write_text("")  # skip the re-exports
    sys.path.insert(0, str(root))
    import transformers.modeling_utils  # noqa: F401  (before the stubs: transformers probes for librosa)

    librosa = types.ModuleType("librosa")
    filters = types.ModuleType("librosa.filters")
    filters.mel = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stub"))
    librosa.filters = filters
    librosa.__spec__ = importlib.machinery.ModuleSpec("librosa", None)
    sys.modules["librosa"] = librosa
    sys.modules["librosa.filters"] = filters
    inf = types.ModuleType("qwen_tts.inference")
    inf_tok = types.ModuleType("qwen_tts.inference.qwen3_tts_tokenizer")
    inf_tok.Qwen3TTSTokenizer = object
    sys.modules["qwen_tts.inference"] = inf
    sys.modules["qwen_tts.inference.qwen3_tts_tokenizer"] = inf_tok
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration

    return Qwen3TTSConfig, Qwen3TTSForConditionalGeneration


def tiny_config(CB: int) -> dict[str, Any]:
    """The model's config.json: a tiny talker, code predictor (vocabulary CB, the tokenizer's codebook) and
    speaker encoder; the codec vocabulary and special ids as shipped."""
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"],
        "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz",
        "tts_model_size": "tiny",
        "tts_model_type": "base",
        "im_start_token_id": 151644, "im_end_token_id": 151645,
        "tts_pad_token_id": 151671, "tts_bos_token_id": 151672, "tts_eos_token_id": 151673,
        "talker_config": {
            # codec vocabulary and special ids as shipped (llama.cpp's runtime fixes the talker codec vocab at 3072)
            "vocab_size": 3072,
            "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 1,
            "num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 16,
            "hidden_act": "silu", "rms_norm_eps": 1e-06, "rope_theta": 1000000,
            "max_position_embeddings": 32768,
            "rope_scaling": {"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default",
                             "type": "default"},
            "text_vocab_size": 256, "text_hidden_size": 32,
            "num_code_groups": 16, "position_id_per_seconds": 13,
            "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_pad_id": 2148,
            "codec_think_id": 2154, "codec_nothink_id": 2155, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157,
            "codec_language_id": {"chinese": 2055, "english": 2050},
            "spk_id": {}, "spk_is_dialect": {},
            "code_predictor_config": {
                "vocab_size": CB,
                "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                "hidden_act": "silu", "rms_norm_eps": 1e-06, "rope_theta": 1000000,
                "max_position_embeddings": 65536, "rope_scaling": None,
                "num_code_groups": 16, "layer_types": ["full_attention"],
            },
        },
        "speaker_encoder_config": {
            "mel_dim": 128, "enc_dim": 48,
            "enc_channels": [16, 16, 16, 16, 48], "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
            "enc_attention_channels": 8, "enc_res2net_scale": 8, "enc_se_channels": 8, "sample_rate": 24000,
        },
    }


def main() -> None:
    import torch
    from safetensors.torch import save_file

    wheel, tok_dir, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    Qwen3TTSConfig, Qwen3TTSForConditionalGeneration = import_model_classes(wheel)
    tok_cfg = json.loads((tok_dir / "config.json").read_text())
    TINY = tiny_config(tok_cfg["decoder_config"]["codebook_size"])
    config = Qwen3TTSConfig(**json.loads(json.dumps(TINY)))
    config.architectures = TINY["architectures"]
    torch.manual_seed(0)
    model = Qwen3TTSForConditionalGeneration(config).eval()

    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            s = p.shape
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(s, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(s, generator=g))
            elif "embedding" in name:
                p.copy_(torch.randn(s, generator=g))
            else:
                fan_in = int(np.prod(s[1:])) if len(s) > 1 else s[0]
                p.copy_(torch.randn(s, generator=g) / np.sqrt(fan_in))

    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(TINY, indent=2) + "\n")
    (out / "speech_tokenizer").mkdir(exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copyfile(tok_dir / f, out / "speech_tokenizer" / f)
    n = sum(v.numel() for v in sd.values())
    print(f"{len(sd)} tensors, {n} parameters")
    for k, v in sd.items():
        print(f"  {k} {list(v.shape)}")


if __name__ == "__main__":
    main()
