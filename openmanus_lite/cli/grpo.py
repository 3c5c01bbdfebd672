r"""`python -m openmanus_lite grpo ...`: GRPO from the command line, in the three modes.

    # single-turn on environment value questions (default rewards: answer_match format tag_count)
    python -m openmanus_lite grpo --model default --envs kg,db,os
    # the seed's line: open-r1's rewards; its accuracy is math_verify's (answers in \boxed{} or $...$)
    python -m openmanus_lite grpo --model default --envs kg,db,os --reward_funcs accuracy format tag_count
    # multi-turn in the environments, from an SFT checkpoint
    python -m openmanus_lite grpo --mode multi --model runs/sft/checkpoint --envs db,kg --max_steps 60
    # tool calling through TRL's environment_factory
    python -m openmanus_lite grpo --mode tool --model default --envs os,db

The OpenManus-RL script's flag names work too (--model_name_or_path, --dataset_name, ...). Writes checkpoints,
`log_history.json`, `reward_curves.png` and the final adapter / model under --output_dir.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from openmanus_lite.cli import args as cli_args
from openmanus_lite.cli import command
from openmanus_lite.errors import UserError
from openmanus_lite.schema import DOMAINS

SEED_FLAGS_WITHOUT_EFFECT = ("packing", "max_seq_length", "max_prompt_length", "dataset_config", "attn_implementation")

EXAMPLES = (
    "python -m openmanus_lite grpo --preset cpu_debug --envs kg,db --n_tasks 3 --max_steps 1 --output_dir runs/grpo_try",
    "python -m openmanus_lite grpo --preset cpu_debug --envs db --max_steps 2 --num_iterations 2 "
    "--reward_funcs answer_match:2 format openmanus_lite.rewards.open_r1:tag_count_reward:0.5",
    "python -m openmanus_lite grpo --config configs/examples/grpo_quick.yaml --push_to_hub --hub_model_id me/agent-grpo",
)


def build_parser() -> argparse.ArgumentParser:
    p = cli_args.make_parser("openmanus_lite grpo", __doc__.split("\n\n")[0], EXAMPLES)
    p.add_argument("--model", "--model_name_or_path", dest="model",
                   help="checkpoint folder, hub name, or 'default' (SmolLM2-135M-Instruct); default: the preset's")
    p.add_argument("--preset", help="t4 | gpu8 | cpu | cpu_debug (default: cpu without a GPU, t4 with)")
    p.add_argument("--mode", choices=("single", "multi", "tool"), default="single")
    p.add_argument("--envs",
                   help="comma list of domains (default kg,db,os); 'none' with --data uses only the trajectories")
    p.add_argument("--data", "--dataset_name", dest="data", help="single-turn: a merged dataset (file, or merge output "
                   "folder: its train split); rows ending in an answer are used")
    p.add_argument("--n_tasks", type=int, default=64, help="generated tasks per domain")
    p.add_argument("--difficulty", default="easy", choices=("easy", "medium", "hard"))
    p.add_argument("--reward_funcs", nargs="+",
                   help="registered rewards or package.module:function, optionally :weight (default per mode: "
                        "single 'answer_match format tag_count', multi 'env_outcome', tool "
                        "'env_outcome invalid_action:0.25'; shaped react_format / invalid_action terms in multi "
                        "were measured to reward-hack, see docs/RESULTS.md)")
    p.add_argument("--seed", type=int, default=0, help="of the generated tasks and of training")
    p.add_argument("--lora_r", type=int, help="LoRA rank; 0 = full fine-tuning")
    p.add_argument("--load_in_4bit", action="store_true", default=None)
    p.add_argument("--use_vllm", action="store_true", default=None,
                   help="GPU only: generate with vLLM (Unsloth fast_inference) when installed")
    p.add_argument("--bf16", action="store_true", default=None)
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in --output_dir (what a rerun does anyway)")
    p.add_argument("--resume_from", help="continue from this checkpoint folder")
    p.add_argument("--no_plot", action="store_true", help="do not write reward_curves.png")
    p.add_argument("--no_save", action="store_true", help="do not save the final model")
    cli_args.add_training_options(p, "GRPORunConfig", "the preset's; --output_dir runs/grpo_<mode>; --num_train_epochs "
                         "without --max_steps: passes over the prompts; --max_completion_length in multi/tool: the "
                         "whole episode (max_episode_tokens); --save_steps 0: no checkpoints")
    for flag in SEED_FLAGS_WITHOUT_EFFECT:
        p.add_argument(f"--{flag}", nargs="?", const=True, help=argparse.SUPPRESS)
    return p


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """(the kit's options, the rest for GRPOConfig): see openmanus_lite/cli/args.py."""
    return cli_args.parse(build_parser(), argv, passthrough=True, config=True)


def _domains(envs: str | None) -> list[str]:
    if (envs or "").strip().lower() == "none":
        return []
    out = list(cli_args.comma_list(envs or "kg,db,os"))
    unknown = [d for d in out if d not in DOMAINS]
    if unknown:
        raise UserError(f"unknown domains {unknown} in --envs; choose from {', '.join(DOMAINS)}")
    return out


def settings(args: argparse.Namespace, extras: list[str] = (), **changes):
    """(preset name, preset, GRPORunConfig) for parsed options: the preset's settings, then the GRPORunConfig
    fields given (`--num_iterations 2`), then the kit's flags, then `changes`. A bad setting fails here."""
    from openmanus_lite.train.configs import GRPORunConfig
    from openmanus_lite.train.presets import default_preset_name, get_preset

    preset_name = args.preset or default_preset_name()
    preset = get_preset(preset_name)
    given = cli_args.run_settings(args, extras, GRPORunConfig, "grpo")
    if args.mode != "single" and "max_completion_length" in given:
        given.setdefault("max_episode_tokens", given.pop("max_completion_length"))
    if given.get("save_steps") == 0:
        given.update(save_strategy="no", save_steps=500)
    if "num_train_epochs" in given and "max_steps" not in given:
        given["max_steps"] = -1  # by epochs: main counts the steps once the prompts are built
    given.setdefault("output_dir", f"runs/grpo_{args.mode}")
    given.update({k: getattr(args, k) for k in ("use_vllm", "bf16") if getattr(args, k) is not None})
    given.update(mode=args.mode, seed=args.seed, report_to=args.report_to)
    if args.reward_funcs:
        given["rewards"] = " ".join(args.reward_funcs)
    return preset_name, preset, preset.grpo_config(**{**given, **changes})


@command
def main(argv: list[str]) -> int:
    args, extras = parse(argv)

    from openmanus_lite.models import LoraSpec
    from openmanus_lite.rewards import accuracy_skips, parse_reward_spec
    from openmanus_lite.splits import GRPO_TRAIN_SEED, training_tasks
    from openmanus_lite.train import grpo as train_grpo
    from openmanus_lite.train.data import load_trajectories
    from openmanus_lite.train.run_folder import claim_output_dir

    for flag in SEED_FLAGS_WITHOUT_EFFECT:
        if getattr(args, flag) is not None:
            print(f"note: --{flag} has no effect on GRPO here (prompt lengths come from the data; "
                  f"completion budgets from --max_completion_length)", file=sys.stderr)
    with cli_args.user_input():  # bad settings, domains and rewards fail here, before data and model
        domains = _domains(args.envs)
        preset_name, preset, cfg = settings(args, extras)
        rewards = parse_reward_spec(cfg.reward_spec)
    if args.mode != "single" and not domains:
        raise UserError(f"--mode {args.mode} needs --envs")
    if args.mode != "single" and args.data:
        raise UserError("--data is for single-turn mode; multi-turn and tool modes train on generated tasks")
    resume = claim_output_dir(cfg.output_dir, "grpo", resume=args.resume_from or "auto",
                              overwrite=args.overwrite_output_dir)

    env_rollout = environment_factory = None
    if args.mode == "single":
        rows, report = [], {}
        if domains:
            rows += train_grpo.value_task_rows(domains, n=args.n_tasks, seed=GRPO_TRAIN_SEED + args.seed,
                                               difficulty=args.difficulty, report=report, for_training=True)
        if args.data:
            report["trajectories"] = {}
            rows += train_grpo.trajectory_rows(load_trajectories(args.data), report=report["trajectories"])
        print(f"single-turn prompts: {len(rows)} ({json.dumps(report)})")
        # the seed's reward line on the kit's agent answers: open-r1's accuracy cannot score most golds
        skipped = accuracy_skips([r["solution"] for r in rows]) if "accuracy" in rewards else 0
        if skipped:
            print(f"note: accuracy (open-r1's, math_verify) cannot parse {skipped} of {len(rows)} golds "
                  "and skips them; it also wants answers in LaTeX (\\boxed{...}). The kit's check for agent "
                  "answers is answer_match (--reward_funcs answer_match format tag_count)", file=sys.stderr)
        dataset = train_grpo.build_single_turn_dataset(rows, shuffle_seed=args.seed)
    else:
        tasks, _ = training_tasks("grpo_train", domains, args.n_tasks, seed=GRPO_TRAIN_SEED + args.seed,
                                  difficulty=args.difficulty)
        if args.mode == "multi":
            dataset, env_rollout = train_grpo.build_env_dataset(tasks, max_turns=cfg.max_turns,
                                                                max_new_tokens=cfg.max_new_tokens)
            if env_rollout.duplicates:
                print(f"note: {env_rollout.duplicates} tasks repeat an earlier task's prompt and were dropped")
        else:
            from openmanus_lite.train.tool_env import tool_dataset, tool_env_factory

            dataset = tool_dataset(tasks, max_turns=cfg.max_turns)
            environment_factory = tool_env_factory(domains, max_turns=cfg.max_turns)
        print(f"{args.mode} tasks: {len(dataset)} ({', '.join(domains)}, {args.difficulty})")
    if cfg.max_steps == -1:  # the steps that make num_train_epochs passes over the prompts
        per_step = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps // cfg.num_generations
        cfg = settings(args, extras, max_steps=max(1, math.ceil(cfg.num_train_epochs * len(dataset) / per_step)))[2]

    if args.lora_r is not None:
        gc = preset.lora.gradient_checkpointing if preset.lora else False
        preset = preset.replace(lora=LoraSpec(r=args.lora_r, alpha=2 * args.lora_r, gradient_checkpointing=gc)
                                if args.lora_r else None)
    if args.load_in_4bit is not None:
        preset = preset.replace(load_in_4bit=args.load_in_4bit)
    model, tokenizer = train_grpo.load_for_grpo(args.model, preset)
    print(f"model {args.model or preset.model} (LoRA r={preset.lora.r if preset.lora else 'none'}, "
          f"4-bit={preset.load_in_4bit}); preset {preset_name}; {cfg.max_steps} steps, rewards: {cfg.reward_spec}")

    result = train_grpo.run_grpo(model, tokenizer, dataset, cfg, rollout_func=env_rollout,
                                 environment_factory=environment_factory, resume=resume or False)

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "log_history.json").write_text(json.dumps(result.log_history, indent=1, default=float))
    curves = train_grpo.reward_curves(result.log_history)
    if not args.no_plot and len(curves):
        from openmanus_lite.eval.plots import file_pyplot

        file_pyplot()
        fig = train_grpo.plot_reward_curves(result.log_history, title=f"GRPO {args.mode}")
        fig.savefig(out / "reward_curves.png", dpi=100)
    if not args.no_save:
        from openmanus_lite.train.sft import is_peft_model, save_adapter, save_merged

        kind = "adapter" if is_peft_model(result.trainer.model) else "merged"  # an adapter stays one
        (save_adapter if kind == "adapter" else save_merged)(result.trainer.model, tokenizer, out / "final")
        cli_args.push_saved(args, {kind: out / "final"})
    summary = {"steps": result.global_step, "wall_s": round(result.wall_s, 1), "output_dir": str(out)}
    if ends := train_grpo.reward_at_ends(result.log_history):
        summary["reward_first"], summary["reward_last"] = round(ends[0], 4), round(ends[1], 4)
    if result.rollout_stats is not None and result.rollout_stats.seconds:
        summary["rollout_tokens_per_s"] = round(result.rollout_stats.tokens_per_s, 1)
    print("done: " + json.dumps(summary))
    return 0
