"""The generation engine: batched decoding, attention for one-query steps, precision per device.

oneDNN's kernel cache is capped at import (`openmanus_lite/__init__.py`): a decoding step's attention meets a new
key length at every step.
"""
