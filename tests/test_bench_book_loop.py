"""`python -m benchmarks.book_loop`: the book's loop's rollout batches read back from when it logged (no GPU here)."""

import sys

import pytest

from benchmarks.book_loop import GENERATED, STEPPED, batches_from_events, main


def _events(*spec):
    return [(t, GENERATED if kind == "g" else STEPPED) for t, kind in spec]


def test_generation_runs_from_the_previous_batchs_last_step_to_the_rewards_log():
    # batch 1: rewards logged at 10 (generation began before any log), steps at 11..14;
    # batch 2: rewards at 20 (generated from 14), steps at 21, 22, 23, 25.
    events = _events((10, "g"), (11, "s"), (12, "s"), (13, "s"), (14, "s"),
                     (20, "g"), (21, "s"), (22, "s"), (23, "s"), (25, "s"))
    first, second = batches_from_events(events)
    assert first == {"generation_s": None, "training_s": 4, "optimizer_steps": 4, "batch_s": 4}
    assert second == {"generation_s": 6, "training_s": 5, "optimizer_steps": 4, "batch_s": 11}


def test_a_batch_that_never_trained_is_left_out():
    events = _events((10, "g"), (11, "s"), (15, "g"))
    assert [r["optimizer_steps"] for r in batches_from_events(events)] == [1]
    assert batches_from_events([]) == []


def test_without_the_books_code_it_says_where_to_get_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "policy_gradients", None)  # not importable, whatever the environment has
    with pytest.raises(SystemExit) as exit_:
        main(["--loss", "grpo"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "natolambert/rlhf-book" in err and "PYTHONPATH" in err
