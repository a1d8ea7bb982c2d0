"""WavTokenizer\x27s decoder (the vocoder of OuteTTS 0.2/0.3) as llama.cpp stores it: `wavtokenizer-dec`."""
