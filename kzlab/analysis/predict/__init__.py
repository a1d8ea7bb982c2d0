"""Predict time and memory from measurements taken on a device, and check the placement simulator against a device.

`oplog` reads llama.cpp's `test-backend-ops perf` output (console, `--output csv`, `--output sql`) into plain
records and looks up the time of a node from the measured rows of the same op and types (exact, interpolated
or extrapolated in the row count). `schedlog` reads a `GGML_SCHED_DEBUG=2` log of the real ggml scheduler
(splits, their input copies, each node's backend) and compares it node by node with `kzlab.simulate`.
"""
