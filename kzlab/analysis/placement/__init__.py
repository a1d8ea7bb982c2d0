"""Predict where ggml_backend_sched would run each node of the decoder graph, for backends not attached here.

`simulate.simulate` builds the graph kzlab would run (never allocating it), evaluates capability profiles
(`capabilities.py` over `devices/*.toml`, rules in `rules.py`) on its real ggml tensors, and replays the
scheduler's passes (`sched.py`); `check.py` checks that replay node for node against the real scheduler on
BLAS and RPC.
"""
