"""Placement what-if: where ggml_backend_sched would run each node of the decoder graph on a backend set.

`api.simulate` builds the graph kzlab would run (never allocating it), evaluates capability profiles
(`profiles/*.toml`, rules in `rules.py`) on its real ggml tensors, and replays the scheduler's passes
(`sched.py`); `validate.py` checks that replay node for node against the real scheduler on BLAS and RPC.
"""
