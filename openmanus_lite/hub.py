"""Upload saved adapters and merged models to the Hugging Face Hub (`--push_to_hub`): the kit's own final folders,
not the trainer's checkpoints, so what lands on the Hub loads with `load_model` / PEFT, tokenizer beside it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

# training state that may sit in a saved folder and is no part of the model
NOT_UPLOADED = ["trainer/**", "checkpoint-*/**", "runs/**", "*.pt", "*.pth", "rng_state*", "optimizer*", "scheduler*"]


class HubPushError(RuntimeError):
    """The upload failed (offline, no token, no access); the files are still on disk."""


def push_folder(folder: str | os.PathLike, repo_id: str, *, path_in_repo: str | None = None,
                private: bool | None = None, token: str | None = None,
                commit_message: str = "Upload from openmanus_lite") -> str:
    """Create `repo_id` if needed and upload `folder` into it (under `path_in_repo`); its URL. `token=None`: HF_TOKEN
    or the saved login."""
    folder = Path(folder)
    if not repo_id or repo_id.count("/") > 1:
        raise ValueError(f"hub_model_id {repo_id!r} must be 'user/name' or 'name'")
    if not folder.is_dir() or not any(folder.iterdir()):
        raise FileNotFoundError(f"nothing to push: {folder} is not a folder with files")
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), path_in_repo=path_in_repo,
                          commit_message=commit_message, repo_type="model", ignore_patterns=NOT_UPLOADED)
    except Exception as e:  # offline, auth, network, quota: all leave the saved files as they are
        raise HubPushError(
            f"could not push {folder} to the Hub repository {repo_id!r}: {type(e).__name__}: {e}. "
            f"The files stay in {folder}; upload them later with `hf upload {repo_id} {folder}`"
        ) from e
    return str(url) + (f"/tree/main/{path_in_repo}" if path_in_repo else "")


def push_outputs(saved: Mapping[str, str | os.PathLike], repo_id: str, *, private: bool | None = None,
                 token: str | None = None) -> dict[str, str]:
    """Push a run's saved folders to one repository, the merged model (else the first) at its root, the others in
    subfolders named after them; {kind: url}."""
    if not saved:
        raise ValueError("nothing was saved, so nothing can be pushed to the Hub")
    root = "merged" if "merged" in saved else next(iter(saved))
    return {kind: push_folder(path, repo_id, path_in_repo=None if kind == root else kind, private=private,
                              token=token, commit_message=f"Upload {kind} from openmanus_lite")
            for kind, path in saved.items()}
