"""Two CPU processes (gloo) train under DDP and end with identical parameters.

On CPU, `accelerate launch` spawns several processes only through MPI, so the test starts
them with torchrun (`torch.distributed.run`), which sets the same RANK / WORLD_SIZE variables
that accelerate's launcher sets on GPUs; TRL's trainers then join a gloo process group.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from openmanus_lite.models import build_tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_ddp"), seed=0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sft", "grpo"])
def test_two_process_training_agrees(tiny, tmp_path, mode):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()),
           str(ROOT / "tests" / "ddp_worker.py"), "--mode", mode, "--model", str(tiny), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=500, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "plain transformers + PEFT backend is used instead" in proc.stdout
    ranks = [json.loads((tmp_path / f"{mode}_rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world_size"] == 2 for r in ranks)
    assert ranks[0]["before"] == ranks[1]["before"]
    assert ranks[0]["after"] == ranks[1]["after"], "DDP ranks diverged"
    assert ranks[0]["after"] != ranks[0]["before"], "training did not change the parameters"
