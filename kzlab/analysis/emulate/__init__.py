"""The device's arithmetic on the host.

`htp` reproduces in numpy what the Hexagon NPU's matrix-product kernels (ggml-hexagon, per release) compute
from the same operand bytes, their known defects included; `device` decodes a placed graph with those products.
"""
