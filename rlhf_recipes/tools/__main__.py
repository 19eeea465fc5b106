"""`python -m rlhf_recipes.tools <command> ...`, the same as the installed `rlhf-recipes` command."""

import sys

from rlhf_recipes.tools.cli import main

sys.exit(main())
