"""TRL's GRPOTrainer takes the registry's reward functions unchanged: two training steps on the
tiny model with every built-in reward, each logged under its registry name."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from openmanus_lite import react  # noqa: E402
from openmanus_lite import rewards as R  # noqa: E402

SPEC = (
    "accuracy:2 answer_match format tag_count reasoning_steps length cosine repetition_penalty soft_overlong_punishment "
    "react_format:0.5 react_tag_count:0.5 env_outcome env_success invalid_action"
)
MAX_COMPLETION = 16


@pytest.mark.slow
def test_grpo_trainer_accepts_registry_rewards(tmp_path):
    try:
        import unsloth  # noqa: F401  (before trl: TRL's CPU kernels need its patch)
    except ImportError:
        pass
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from openmanus_lite.models import build_tiny_model, load_model

    texts = [react.format_tagged("add them", "7"), react.format_turn("done", react.answer("7"))]
    model_dir = build_tiny_model(tmp_path / "tiny", texts=texts, seed=0)
    model, tok = load_model(model_dir, backend="auto")
    tok.padding_side = "left"

    system = "Answer in <think>\n...\n</think>\n<answer>\n...\n</answer>."
    rows = [(f"What is {a} + {b}?", str(a + b)) for a, b in [(3, 4), (1, 1), (2, 5), (6, 0)]]
    ds = Dataset.from_list(
        [
            {
                "prompt": [{"role": "system", "content": system}, {"role": "user", "content": q}],
                "solution": s,
                # what the multi-turn rollout would pass; here plain columns, read the same way
                "env_outcome": 0.5,
                "env_success": False,
                "invalid_actions": 1,
                "num_turns": 2,
                "domain": "kg",
            }
            for q, s in rows
        ]
    )
    R.check_reward_columns(SPEC, ds.column_names)
    funcs, weights = R.build_rewards(
        SPEC, params={"soft_overlong_punishment": {"max_completion_len": MAX_COMPLETION, "soft_punish_cache": 4}}
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=MAX_COMPLETION,
        learning_rate=1e-4,
        reward_weights=weights,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=funcs, args=args, train_dataset=ds)
    trainer.train()

    assert trainer.state.global_step == 2
    logged = [r for r in trainer.state.log_history if "reward" in r]
    assert len(logged) == 2
    for name in R.parse_reward_spec(SPEC):
        value = logged[0][f"rewards/{name}/mean"]
        (row,) = R.describe_rewards(name)
        lo, hi = row["range"]
        assert math.isnan(value) or lo <= value <= hi, (name, value)
    # the columns reached the rewards: constants from the dataset
    assert logged[0]["rewards/env_outcome/mean"] == pytest.approx(0.5)
    assert logged[0]["rewards/invalid_action/mean"] == pytest.approx(-0.5)
