"""The docs' numbers about shipped runs are the shipped files' numbers; the user docs speak of what the project does,
not of how it was built; every `page.md#anchor` the docs and the code point to exists. Cheap: reads files only.

Each claim is rendered from the file in reference_runs/ it comes from and must appear, as rendered, on its page: a
re-run that changes a shipped file fails here until the page says the new number. Numbers that must not come back
(stale ones: an older base's, or a sum that does not add up) are listed too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NANO = REPO / "reference_runs" / "nano"
USER_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _json(path: str) -> dict:
    return json.loads((REPO / path).read_text(encoding="utf-8"))


def _points(value: float, signed: bool = True) -> str:
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def _gain(stats: dict) -> str:
    """A gain in points with its interval, as the pages write it: +10.2 [+2.1, +18.2]."""
    low, high = stats["gain_interval"]
    return f"{_points(stats['gain'])} [{_points(low)}, {_points(high)}]"


def _nano_book(family: str, algorithm: str, metric: str = "exact_match") -> dict:
    rows = _json(f"reference_runs/nano/nano_book_{family}.json")["algorithms"]
    return next(r for r in rows if r["algorithm"] == algorithm)["metrics"][metric]


def grpo_three_seeds() -> str:
    return _gain(_nano_book("policy_gradient", "grpo"))


def dpo_exact_match() -> str:
    return _gain(_nano_book("direct_alignment", "dpo"))


def how_many_learn(family: str) -> str:
    rows = _json(f"reference_runs/nano/nano_book_{family}.json")["algorithms"]
    return f"{sum(r['learns'] for r in rows)} of the {len(rows)}"


def nano_book_seeds() -> str:
    seeds = {_json(f"reference_runs/nano/nano_book_{family}.json")["algorithms"][0]["seeds"]
             for family in ("policy_gradient", "direct_alignment")}
    return f"({seeds.pop()} seeds for each family)" if len(seeds) == 1 else f"seeds differ: {seeds}"


def rejection_sampling_top_k_overall() -> str:
    runs = _json("reference_runs/nano/figures/nano_rejection_sampling.json")["runs"]
    held = next(r for r in runs if r["name"] == "top_k_overall")["heldout"]
    return f"top_k_overall {_points(held['before'], False)}% -> {_points(held['after'], False)}%"


def sdpo_gain() -> str:
    ev = _json("reference_runs/nano/figures/sdpo/eval/heldout.json")["difference"]["exact_match"]
    return f"{_points(ev['value'])} [{_points(ev['low'])}, {_points(ev['high'])}]"


def grpo_older_base_interval() -> str:
    """The 5-seed sweep shipped in reference_runs/sweeps/grpo-nano-seeds ran on the older base (14.5%)."""
    stats = _json("reference_runs/sweeps/grpo-nano-seeds/sweep.json")["cells"][0]["metrics"]["gain/exact_match"]
    return f"[{_points(stats['low'])}, {_points(stats['high'])}]"


def nano_base() -> str:
    build = _json("reference_runs/nano/nano_book_policy_gradient.json")["base"]["build"]
    return f"{_points(build['value'], False)}%"


CLAIMS = [  # (page, what it states, the statement rendered from the shipped file)
    ("docs/nano.md", "GRPO's held-out gain over 3 seeds", grpo_three_seeds),
    ("README.md", "GRPO's held-out gain over 3 seeds", grpo_three_seeds),
    ("README.md", "how many policy gradients learn", lambda: how_many_learn("policy_gradient") + " policy gradients"),
    ("README.md", "how many direct-alignment losses learn",
     lambda: how_many_learn("direct_alignment") + " direct-alignment losses learn"),
    ("docs/sweeps.md", "GRPO's held-out gain over 3 seeds on today's base", grpo_three_seeds),
    ("docs/policy_gradients.md", "GRPO's held-out gain on nano", grpo_three_seeds),
    ("docs/nano.md", "DPO's held-out exact-match gain", dpo_exact_match),
    ("docs/nano.md", "how many policy gradients learn", lambda: how_many_learn("policy_gradient") + " do"),
    ("docs/nano.md", "how many direct-alignment losses learn", lambda: how_many_learn("direct_alignment") + " learn"),
    ("docs/nano.md", "the nano base's held-out exact match", nano_base),
    ("docs/evaluate.md", "the seeds `compare --reference nano` lays over a run", nano_book_seeds),
    ("docs/rejection_sampling.md", "top_k_overall before and after", rejection_sampling_top_k_overall),
    ("docs/sdpo.md", "SDPO's held-out gain", sdpo_gain),
    ("docs/sweeps.md", "the older base's 5-seed GRPO interval", grpo_older_base_interval),
]

STALE = [  # (page, a statement the shipped files contradict)
    ("docs/sweeps.md", "start ~5 points lower"),  # the older base's +27.9 against today's +10.2
    ("docs/sweeps.md", "**1.86x**"),  # stated beside 70.4 s against 31.6 s: that is 2.23x
    ("docs/nano.md", "+12.5, targets met"),  # DPO's shipped exact-match gain is +0.2
    ("docs/policy_gradients.md", "21% -> ~45%"),
    ("docs/rejection_sampling.md", "39.5%"),
    ("docs/sdpo.md", "+17.5"),
    ("README.md", "first 200 rows"),  # every row is checked (validation.py)
    ("docs/evaluate.md", "2 for direct alignment"),  # 3 seeds ship
]


@pytest.mark.parametrize("page, what, render", CLAIMS, ids=[f"{p}: {w}" for p, w, _ in CLAIMS])
def test_each_number_a_page_states_about_a_shipped_run_is_the_files(page, what, render):
    text = (REPO / page).read_text(encoding="utf-8")
    stated = render()
    assert stated in text, f"{page} should state {what} as `{stated}` (from the shipped file); it does not"


@pytest.mark.parametrize("page, stale", STALE, ids=[f"{p}: {s}" for p, s in STALE])
def test_no_stale_number_comes_back(page, stale):
    assert stale not in (REPO / page).read_text(encoding="utf-8"), f"{page} states `{stale}` again"


def test_the_older_bases_numbers_say_which_base():
    """sweeps.md may quote the 5-seed GRPO sweep of the older base, saying so in the same paragraph."""
    text = (REPO / "docs/sweeps.md").read_text(encoding="utf-8")
    paragraph = next(p for p in text.split("\n\n") if grpo_older_base_interval() in p)
    assert "older base" in paragraph and "14.5%" in paragraph, paragraph


# Words of how the project was built, not of what it does; "this machine" meaning the one the docs were written on
# (the reader's machine is "your machine").
BUILD_WORDS = re.compile(r"\b(issues?|sessions?|lent)\b|this machine|#\d\d\b", re.IGNORECASE)


def test_user_docs_use_no_build_process_words():
    found = [f"{page.relative_to(REPO)}:{n}: {m.group(0)!r}" for page in USER_DOCS
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             for m in BUILD_WORDS.finditer(line)]
    assert not found, f"build-process words in the user docs: {found}"


def test_the_build_words_pattern_catches_what_it_is_for():
    for text in ("the issue's target", "issue #27", "this session's machine", "the machine lent for this",
                 "on this machine", "Issues"):
        assert BUILD_WORDS.search(text), text
    for text in ("tissue", "lentil", "your machine"):
        assert not BUILD_WORDS.search(text), text


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


LINK = re.compile(r"(?:docs/)?([a-z_]+\.md)#([a-z0-9_-]+)")


def test_every_anchor_the_docs_and_the_code_point_to_exists():
    """`evaluate --help` pointed to docs/tools.md#evaluate, a heading that does not exist."""
    sources = [*USER_DOCS, *(REPO / "rlhf_recipes").rglob("*.py"), *(REPO / "lab").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]
    broken = []
    for source in sources:
        for m in LINK.finditer(source.read_text(encoding="utf-8")):
            page = REPO / ("README.md" if m.group(1) == "README.md" else f"docs/{m.group(1)}")
            if page.exists() and m.group(2) not in _anchors(page):
                broken.append(f"{source.relative_to(REPO)}: {m.group(0)}")
    assert not broken, f"links to headings that do not exist: {sorted(set(broken))}"


def test_every_docs_page_can_be_read_in_one_sitting():
    """A page of docs/ stays under 300 lines (nano.md was 842, tools.md 643): history goes beside its runs in
    reference_runs/, measurements beside the benchmarks, and a long page splits by task."""
    long = {p.name: n for p in (REPO / "docs").glob("*.md") if (n := len(p.read_text(encoding="utf-8").splitlines())) > 300}
    assert not long, f"pages over 300 lines: {long}"
