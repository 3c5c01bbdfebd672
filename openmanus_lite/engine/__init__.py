"""The generation engine: batched decoding, attention for one-query steps, precision per device."""
