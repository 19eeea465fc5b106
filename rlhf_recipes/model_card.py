"""A run's model card: a huggingface_hub ModelCard, the hub's metadata (ModelCardData) over a short body.

Written into the run folder as README.md at every checkpoint and at the end, in place of TRL's draft (TRL writes
one before each checkpoint; for a model loaded from a local folder its first line reads "a fine-tuned version of
[None]"). `rlhf-recipes export` builds the full card (settings, metrics, evaluations) on the same metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def hub_id(value: Any) -> str | None:
    """`value` when it names a hub repo (`owner/name`), not a local folder or a profile's embedded model."""
    if not isinstance(value, str) or value.count("/") != 1 or value.startswith((".", "/", "~")) or Path(value).exists():
        return None
    return value


def card_metadata(config: dict[str, Any], algorithm: str, *, adapter: bool = False,
                  pipeline_tag: str | None = None):
    """The front matter the hub reads: library, base model and datasets (hub ids only), tags."""
    from huggingface_hub import ModelCardData

    from rlhf_recipes.data.sources import SOURCES

    dataset = None
    if not config.get("profile") and not config.get("data_files"):
        source = SOURCES.get(config.get("dataset"))
        dataset = hub_id(config.get("dataset_name") or (source.hub_id if source else None))
    return ModelCardData(library_name="peft" if adapter else "transformers",
                         base_model=hub_id(config.get("model_name_or_path")),
                         datasets=[dataset] if dataset else None, tags=["rlhf-recipes", "trl", algorithm],
                         pipeline_tag=pipeline_tag)


def model_card(data, body: list[str]):
    """A huggingface_hub ModelCard of `data` (its front matter, checked as the hub reads it) over the body's lines."""
    from huggingface_hub import ModelCard

    return ModelCard("\n".join(["---", data.to_yaml(), "---", *body]))


def run_card(config: dict[str, Any], algorithm: str, folder: Path, state: str) -> str:
    """The run folder's README.md: metadata, where the model comes from, and how to export it."""
    data = card_metadata(config, algorithm, adapter=bool(config.get("use_peft")))
    model = config.get("model_name_or_path")
    base = f"[{data.base_model}](https://huggingface.co/{data.base_model})" if data.base_model else f"`{model}`"
    on = f" on [{data.datasets[0]}](https://huggingface.co/datasets/{data.datasets[0]})" if data.datasets else ""
    return str(model_card(data, [
        "", f"# {folder.name}", "",
        f"{base} trained with rlhf-recipes' `{algorithm}` recipe{on} ({state}).", "",
        f"`rlhf-recipes export {folder} OUT` writes a standalone model folder with the full card (key settings, "
        "final metrics, evaluations, the recipe); `config.yaml` beside this file re-runs the run.", ""]))
