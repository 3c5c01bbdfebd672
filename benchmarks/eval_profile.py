"""Where an evaluation's time goes: the demo's evaluation (`benchmarks/memory.py`'s eval stage) with timers around
the generation engine's parts.

Seconds in generation calls, in decoding batches and their prefill, in dropping stopped rows from a batch, in
planning shared prefixes; the prefix cache's reused and encoded prompt tokens and the entries it let go; the
process's peak resident memory. One process, the demo's settings (the `cpu` preset, 32 episodes a call, its turn
limits), greedy; what is left of the wall time is the environments and the episode loop.

    python benchmarks/eval_profile.py                          # the untrained default model, the demo's 60 episodes
    OPENMANUS_KV_BUDGET_GB=2 python benchmarks/eval_profile.py   # another key/value budget (default 1.5 GB)

Ends with one line `RESULT {json}`.
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def time_calls(owner, name: str, seconds: collections.Counter, calls: collections.Counter) -> None:
    """Replace `owner.name` with a wrapper adding each call's seconds to `seconds[name]` and counting it in `calls`."""
    inner = getattr(owner, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - t0
            calls[name] += 1

    setattr(owner, name, timed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="default", choices=["default", "tiny"])
    p.add_argument("--episodes", type=int, default=60, help="episodes, spread over the six domains")
    args = p.parse_args(argv)
    try:
        import unsloth  # noqa: F401  (the kit's import order)
    except Exception:
        pass
    import memory  # benchmarks/memory.py: the demo's evaluation stage

    from openmanus_lite.engine import decoding, generation

    seconds: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for owner, name in ((generation, "generate_from_ids"), (generation, "decode"), (decoding, "_prefill"),
                        (decoding.BufferLayer, "batch_select_indices"), (generation, "share_prefixes")):
        time_calls(owner, name, seconds, calls)
    caches, dropped = [], collections.Counter()
    init, drop = generation.PrefixCache.__init__, generation.PrefixCache.drop

    def counted_init(self, *a, **kw):
        init(self, *a, **kw)
        caches.append(self)

    def counted_drop(self, eid):
        dropped["entries"] += 1
        dropped["tokens"] += len(self._entries[eid][0])
        return drop(self, eid)

    generation.PrefixCache.__init__, generation.PrefixCache.drop = counted_init, counted_drop
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        info = memory.stage_eval(args, memory._preset(args.model, "eval"), Path(tmp))
    result = {"wall_s": round(time.perf_counter() - t0, 1),
              "seconds": {k: round(v, 1) for k, v in seconds.items()}, "calls": dict(calls),
              "reused_tokens": sum(c.reused_tokens for c in caches),
              "encoded_tokens": sum(c.encoded_tokens for c in caches), "cache_drops": dict(dropped),
              "episodes": info["episodes"], "generated_tokens": info["generated_tokens"],
              "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
