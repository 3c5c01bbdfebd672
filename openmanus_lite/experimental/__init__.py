"""What was measured and did not (yet) beat the recipe, kept for the benchmark that measures it.

Nothing in the library imports this package; importing it warns (OpenManusExperimentalWarning) because its code
may change or go without notice. OPENMANUS_LITE_EXPERIMENTAL_SILENCE=1 silences it, as TRL_EXPERIMENTAL_SILENCE does.

    corrections   the expert's corrections at a model's own mistakes (DAgger-style SFT data);
                  benchmarks/sft_learning.py --corrections-at
"""

from __future__ import annotations

import os
import warnings

SILENCE_ENV = "OPENMANUS_LITE_EXPERIMENTAL_SILENCE"


class OpenManusExperimentalWarning(UserWarning):
    """Code under openmanus_lite.experimental was imported: measured, not better, may change or go."""


if os.environ.get(SILENCE_ENV, "").strip().lower() in ("", "0", "false", "no"):
    warnings.warn(
        "openmanus_lite.experimental holds code that measured no gain over the recipe (kept for its benchmark); "
        f"it may change or be removed without notice. Set {SILENCE_ENV}=1 to silence this warning.",
        OpenManusExperimentalWarning,
        stacklevel=2,
    )
