"""A tool's own flags beside the recipe overrides it passes on (evaluate, sweep): a misspelt tool flag names the tool's.

`rlhf-recipes evaluate RUN --baselin` reaches the recipe as an override `--baselin`, and the recipe's error names the
recipe's keys; the user meant the tool's `--baseline`.
"""

from __future__ import annotations

from rlhf_recipes.config import RecipeError, _suggest, load_recipe


def refuse_misspelt_tool_flags(parser, overrides: list[str], recipe_argv: list[str]) -> None:
    """Called once the recipe refused `overrides`: an override that is no setting of the recipe (`recipe_argv`: the
    recipe without the overrides) but is close to one of the tool's flags is refused naming that flag."""
    try:
        recipe = load_recipe(recipe_argv, construct=False)
    except RecipeError:
        return  # the recipe itself is wrong: its own error says so
    flags = [f for f in parser._option_string_actions if f.startswith("--")]
    for token in overrides:
        flag = token.partition("=")[0]
        if not flag.startswith("--") or recipe.has(flag[2:].replace("-", "_")):
            continue
        hint = _suggest(flag, flags)
        if hint:
            raise RecipeError(f"command line: unknown option `{flag}` for {parser.prog}.{hint} (all of its options: "
                              f"{parser.prog} --help)")
