"""The Qwen3-TTS 12 Hz codec decoder (the Qwen3-TTS-Tokenizer-12Hz decoder)."""
