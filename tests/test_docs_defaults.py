"""Every value a docs table gives as a recipe's default is the value that recipe resolves to (issue 27, item 6).
Cheap: parses the pages and resolves recipes without building any config; runs nothing.

Three shapes of table state recipe values, each checked against `load_recipe` (registry defaults, recipe file):
- `| option | default | what |`: each option's default (text in parentheses explains, e.g. "null (the policy)");
- `| what the book does | how the recipe does it |`: every `key: value` of the second column, for every recipe the
  page documents; a parenthesis that names TRL describes TRL's setting, not ours, and is skipped;
- a `book settings` column: the row's recipe's numbers, written as the book's ("LR 5e-6, beta 0.1, len 512, 2x8").
A table of one of these shapes on a page that PAGE_RECIPES does not name fails, so a new one cannot go unchecked.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from conftest import setting_of

REPO = Path(__file__).resolve().parents[1]
RS = [f"rejection_sampling_{rule}" for rule in ("top_per_prompt", "random_per_prompt", "top_k_overall",
                                                 "random_k_overall")]
# The recipes whose values a page's option and book-vs-recipe tables state ('book settings' rows name their own).
PAGE_RECIPES = {"docs/policy_gradients.md": ["ppo"], "docs/sft.md": ["sft"], "docs/sdpo.md": ["sdpo"],
                "docs/rejection_sampling.md": RS}
PAIR = re.compile(r"`([a-z_]+): ([^`]+)`")
# A phrase of a 'book settings' cell -> the recipe key whose value it gives (None: the phrase is `key: value`).
BOOK_SETTINGS = {
    r"\bLR ([0-9.e-]+)": "learning_rate",
    r"\bbeta ([0-9.]+)": "beta",
    r"\blen ([0-9]+)": "max_length",
    r"\bwd ([0-9.]+)": "weight_decay",
    r"\bwarmup ([0-9.]+)": "warmup_steps",  # transformers 5: a float below 1 is a ratio
    r"\beps ([0-9.]+)": "label_smoothing",  # cDPO's epsilon
    r"\b([0-9]+) ep\b": "num_train_epochs",
    r"^([0-9]+)\b(?! ep)": "num_samples",  # a cell opening with a count: the rows trained on
    r"\b([0-9]+) (?:pairs|prompts|rows)\b": "num_samples",
    r"\b90/10\b": ("eval_fraction", "0.1"),
    r"\bno clipping\b": ("max_grad_norm", "0.0"),
    r"`([a-z_]+): ([^`]+)`": None,
}


def tables(page: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header cells, body rows of cells) of every markdown table of the page."""
    found, current = [], None
    for line in (REPO / page).read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if current is None:
            current = (cells, [])
            found.append(current)
        elif not set("".join(cells)) <= set("-: "):  # not the |---| line
            current[1].append(cells)
    return found


@cache
def resolved(name: str):
    from rlhf_recipes.config import load_recipe

    return load_recipe([str(REPO / "recipes" / f"{name}.yaml")], construct=False)


def same(text: str, value) -> bool:
    """The docs' text (YAML, as a recipe would write it) equals the resolved value; numbers compare as numbers
    (YAML reads 5e-6 as text, and 0 and 0.0 are one value)."""
    stated = yaml.safe_load(text)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return math.isclose(float(stated), value, rel_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return stated == value


def option_defaults(page: str) -> list[tuple[str, str]]:
    pairs = []
    for header, rows in tables(page):
        if header[:2] != ["option", "default"]:
            continue
        for row in rows:
            keys = re.findall(r"`([a-z_]+)`", row[0])
            values = [v.strip() for v in re.sub(r"\s*\(.*\)$", "", row[1]).split(",")]
            assert len(keys) == len(values), f"{page}: `{row[0]}` names {len(keys)} options, `{row[1]}` gives values"
            pairs += zip(keys, values)
    return pairs


def recipe_pairs(page: str) -> list[tuple[str, str]]:
    pairs = []
    for header, rows in tables(page):
        if header[:2] == ["what the book does", "how the recipe does it"]:
            for row in rows:
                ours = re.sub(r"\([^()]*\bTRL\b[^()]*\)", "", row[1])  # "(TRL: ...)" states TRL's value
                pairs += PAIR.findall(ours)
    return pairs


def book_settings(page: str) -> list[tuple[str, str, str, str]]:
    """(recipe, key, stated value, the cell) for each value a 'book settings' cell states."""
    stated = []
    for header, rows in tables(page):
        if "book settings" not in header:
            continue
        for row in rows:
            name = re.search(r"([a-z_0-9]+)\.yaml", row[0]).group(1)
            cell = row[header.index("book settings")]
            for pattern, key in BOOK_SETTINGS.items():
                for match in re.finditer(pattern, cell):
                    if key is None:
                        stated.append((name, match.group(1), match.group(2), cell))
                    elif isinstance(key, tuple):
                        stated.append((name, *key, cell))
                    else:
                        stated.append((name, key, match.group(1), cell))
    return stated


DOCS = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))


def test_every_default_table_is_on_a_page_whose_recipes_are_known():
    unknown = [page for page in DOCS if (option_defaults(page) or recipe_pairs(page)) and page not in PAGE_RECIPES]
    assert not unknown, f"these pages state recipe defaults in a table: add them to PAGE_RECIPES: {unknown}"
    assert all(option_defaults(p) or recipe_pairs(p) for p in PAGE_RECIPES), "a page lost its table (or the parser)"


@pytest.mark.parametrize("page", sorted(PAGE_RECIPES))
def test_a_pages_stated_defaults_are_its_recipes_values(page):
    wrong = []
    for name in PAGE_RECIPES[page]:
        recipe = resolved(name)
        for key, text in [*option_defaults(page), *recipe_pairs(page)]:
            if not same(text, setting_of(recipe, key)):
                wrong.append(f"{name}: `{key}` is {setting_of(recipe, key)!r}, the page says {text}")
    assert not wrong, f"{page}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", ["docs/direct_alignment.md", "docs/reward_models.md"])
def test_book_settings_columns_are_the_recipes_values(page):
    stated = book_settings(page)
    assert len({name for name, *_ in stated}) >= 4, "the 'book settings' column was not parsed"
    wrong = [f"{name}: `{key}` is {setting_of(resolved(name), key)!r}, the page says {text} ({cell})"
             for name, key, text, cell in stated if not same(text, setting_of(resolved(name), key))]
    assert not wrong, f"{page}:\n" + "\n".join(wrong)


def test_the_checks_can_fail():
    """A made-up wrong default is caught, and TRL's value in parentheses is not taken for ours."""
    assert not same("0.9", setting_of(resolved("ppo"), "lam")) and same("5e-6", 5e-06) and same("0", 0.0)
    assert not same("true", False) and same("null", None)
    row = "| x | `max_reprompt_len: 1024` (TRL: `max_reprompt_len: 10240`) |"
    cells = [c.strip() for c in row.strip().split("|")[1:-1]]
    assert PAIR.findall(re.sub(r"\([^()]*\bTRL\b[^()]*\)", "", cells[1])) == [("max_reprompt_len", "1024")]


# docs/policy_gradients.md's `| | book (default) | TRL | option |` table describes behaviour in words; the rows whose
# "book (default)" cell states a setting are checked here, for every policy-gradient recipe: row label -> (the cell's
# words that state it, the recipe key, its value).
BOOK_DEFAULT_ROWS = {
    "log-probs": ("from logits at temperature 1", "logprobs_at_sampling_temperature", False),
    "z-score eps": ("1e-8", "advantage_eps", 1e-8),
    "KL (beta 0 in every recipe)": ("in the reward for reinforce/rloo", "beta", 0.0),
    "non-finite loss": ("micro-batch skipped", "nonfinite_loss", "skip"),
}


def test_policy_gradient_book_default_rows_are_every_recipes_values():
    from rlhf_recipes.registry import ALGORITHMS, family_of

    rows = {row[0]: row[1] for header, body in tables("docs/policy_gradients.md")
            if header == ["", "book (default)", "TRL", "option"] for row in body}
    recipes = [name for name, algorithm in ALGORITHMS.items() if family_of(algorithm).name == "policy_gradient"]
    assert len(recipes) == 10
    wrong = []
    for label, (words, key, value) in BOOK_DEFAULT_ROWS.items():
        assert words in rows.get(label, ""), f"docs/policy_gradients.md: the row `{label}` no longer says `{words}`"
        wrong += [f"{name}: `{key}` is {setting_of(resolved(name), key)!r}, the row `{label}` says {value!r}"
                  for name in recipes if setting_of(resolved(name), key) != value]
    assert not wrong, "\n".join(wrong)
