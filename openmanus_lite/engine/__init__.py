"""The generation engine: batched decoding, attention for one-query steps, precision per device.

Memory note (issue #41): bf16 matmuls on a CPU build one oneDNN primitive per new shape and keep up to 1024 of
them; `ONEDNN_PRIMITIVE_CACHE_CAPACITY=32` (set before torch first multiplies) measured 0.12-0.17 GB lower peaks
on the default model (benchmarks/memory.py, on a loaded machine). Its cost in speed is not measured yet, so the
kit does not set it for you.
"""
