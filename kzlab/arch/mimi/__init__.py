"""Mimi, Kyutai's codec: the decoder of Moshi, Sesame CSM and PocketTTS."""
