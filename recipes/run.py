#!/usr/bin/env python
"""Run any recipe: `python recipes/run.py recipes/dpo.yaml [--profile tiny] [--KEY VALUE ...]`.

Under accelerate: `accelerate launch --config_file accelerate_configs/4gpu.yaml recipes/run.py recipes/dpo.yaml`.
The pipeline itself is `rlhf_recipes.train.main` (also `rlhf-recipes train`).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout runs without installing

from rlhf_recipes.train import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli())
