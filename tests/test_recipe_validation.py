"""Recipes resolve, and bad input fails early with a message that says what to fix."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import pytest

from conftest import ROOT, run_recipe, setting_of
from rlhf_recipes.config import RecipeError, load_recipe
from rlhf_recipes.data.sources import DataError, normalize_rows
from rlhf_recipes.registry import ALGORITHMS

# Set by TRL's or transformers' __post_init__ from other values (or normalized: report_to "none" -> []).
DERIVED_BY_TRL = {"debug", "accelerator_config", "disable_tqdm", "pad_to_multiple_of", "gradient_checkpointing",
                  "report_to", "steps_per_generation", "generation_batch_size", "do_eval", "epsilon_high",
                  "activation_checkpointing", "dataset_kwargs"}  # dataset_kwargs: ours (RecipeArgs) and SFTConfig's
# What `rlhf-recipes evaluate`, the data sources and the trained-model tools read with recipe.setting(), never
# building TRL's configs.
READ_WITHOUT_TRL = {"seed", "per_device_eval_batch_size", "max_length", "boxed_rule", "eval_split", "eval_questions",
                    "eval_max_new_tokens", "max_completion_length", "temperature", "top_p", "top_k", "min_p",
                    "chat_template_from", "enable_thinking", "chat_template_kwargs", "output_dir", "reward_funcs",
                    "value_model_path", "share_value_backbone", "rollout_backend", "bf16"}
# (report_to is read before the build too, through preflight.reports_to_wandb, which applies transformers' own
# normalisation of `all` and `none`: it is in DERIVED_BY_TRL.)
ALL_RECIPES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", ALL_RECIPES)
@pytest.mark.parametrize("profile", [None, "tiny"])
def test_every_recipe_resolves(recipe, profile, tmp_path):
    # The real recipes train in bf16, which TrainingArguments refuses on this CPU-only machine.
    argv = [recipe, "--output_dir", str(tmp_path)] + (["--profile", profile] if profile else ["--bf16", "false"])
    resolved = load_recipe(argv)
    assert resolved.algorithm.name in ALGORITHMS
    assert resolved.resolved["algorithm"] == resolved.algorithm.name
    # `recipe.setting(key)` (what the checks before TRL's import, evaluation, chat and export read) is what the built
    # trainer's config holds, except the few values TRL's __post_init__ derives or rewrites, read by none of them.
    differ = set()
    for key in set(resolved.schema["training"]) - set(resolved.schema["recipe"]) - set(resolved.schema["model"]):
        built = getattr(resolved.training, key, None)
        if (built.value if isinstance(built, enum.Enum) else built) != resolved.setting(key):
            differ.add(key)
    assert differ <= DERIVED_BY_TRL, differ - DERIVED_BY_TRL
    assert not differ & READ_WITHOUT_TRL


def test_every_registered_algorithm_has_a_recipe():
    names = {Path(r).stem for r in ALL_RECIPES}
    assert set(ALGORITHMS) <= names, f"algorithms without recipes/<name>.yaml: {set(ALGORITHMS) - names}"


def test_registry_entries_carry_their_facts():
    """Each family is an object with every hook; each entry states its class paths, and each the book ran its shape
    (an algorithm the book never ran, one a user adds, has no book facts and needs none)."""
    from rlhf_recipes.families.base import Family
    from rlhf_recipes.book_reference import BOOK, book_reference
    from rlhf_recipes.registry import family_of

    assert set(BOOK) <= set(ALGORITHMS)  # the book's facts name registry algorithms only

    for algorithm in ALGORITHMS.values():
        family = family_of(algorithm)
        assert isinstance(family, Family) and family.name == algorithm.family
        assert ":" in algorithm.config_class and ":" in algorithm.trainer_class
        if algorithm.name not in BOOK:
            continue
        if algorithm.family == "policy_gradient":  # every one the book ran has a published run of a known shape
            book = book_reference(algorithm.name)
            assert book.runs and book.shape.prompts_per_rollout, algorithm.name
        if algorithm.family == "direct_alignment":
            assert book_reference(algorithm.name).shape.accumulation_steps, algorithm.name
            assert book_reference(algorithm.name).shape.beta, algorithm.name
    # sdpo: a live teacher
    assert {"simpo", "orpo", "sdpo"} <= {a.name for a in ALGORITHMS.values() if not a.reference_model}
    assert ALGORITHMS["dpo"].reference_model and ALGORITHMS["grpo"].reference_model


def test_the_tools_facts_name_the_registrys_families():
    """A tool keeps its facts of each family beside itself (the planner's, compare's, the lab's figures): every family
    they name is one the registry uses, and every family the registry uses is listed (a new family gets the tools'
    defaults, which a tool must then have)."""
    from lab.book_figures import BOOK_FIGURES, NANO_BOOK
    from rlhf_recipes.registry import FAMILIES
    from rlhf_recipes.tools.compare.family_logs import COMPARE_METRICS, LOGS_BY_ROLLOUT, LOGS_PREFIXED
    from rlhf_recipes.tools.planner.family_shapes import GENERATES_ROLLOUTS
    from rlhf_recipes.tools.trained_model import SCORING_FAMILIES

    assert set(FAMILIES) == {a.family for a in ALGORITHMS.values()}
    assert GENERATES_ROLLOUTS == {"policy_gradient", "self_distillation"}
    assert LOGS_BY_ROLLOUT == {"policy_gradient"} and LOGS_PREFIXED == SCORING_FAMILIES == {"reward_model"}
    assert set(COMPARE_METRICS) == set(FAMILIES) and all(COMPARE_METRICS.values())
    assert set(BOOK_FIGURES) <= set(FAMILIES) and set(NANO_BOOK) <= set(BOOK_FIGURES)


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return str(path)


def _error(argv: list[str]) -> str:
    with pytest.raises(RecipeError) as info:
        load_recipe(argv)
    return str(info.value)


def test_misspelt_yaml_key_names_file_key_and_suggestion(tmp_path):
    path = _write(tmp_path, "algorithm: dpo\nlearnig_rate: 1.0e-6\n")
    message = _error([path])
    assert path in message and "`learnig_rate`" in message and "Did you mean `learning_rate`?" in message


def test_misspelt_command_line_flag(tmp_path):
    message = _error(["recipes/dpo.yaml", "--bta", "0.2"])
    assert "command line" in message and "`--bta`" in message and "`beta`" in message


@pytest.mark.parametrize("recipe", ["dapo", "maxrl"])
def test_a_kl_coefficient_where_the_books_loss_has_no_kl_term_is_refused(recipe, tmp_path):
    """The book's DAPOLoss and MaxRLLoss read no beta: a beta there would add a KL term the book's algorithm has not,
    so it is refused in one line naming where it came from (before: it trained with our KL term added)."""
    with pytest.raises(RecipeError, match=r"^command line: `beta` 0.04: the book's .* loss has no KL term"):
        load_recipe([f"recipes/{recipe}.yaml", "--beta", "0.04"], construct=False)
    yaml = tmp_path / "r.yaml"
    yaml.write_text((ROOT / f"recipes/{recipe}.yaml").read_text() + "beta: 0.1\n")
    with pytest.raises(RecipeError, match=f"^{yaml}: `beta` 0.1"):
        load_recipe([str(yaml)], construct=False)
    assert setting_of(load_recipe([f"recipes/{recipe}.yaml", "--beta", "0.0"], construct=False), "beta") == 0.0


def test_label_smoothing_that_trls_loss_would_ignore_is_refused():
    """TRL's sigmoid loss reads no label_smoothing: a 0.1 trained plain DPO without a word."""
    with pytest.raises(RecipeError, match=r"^command line: `label_smoothing` 0.1: TRL's sigmoid"):
        load_recipe(["recipes/dpo.yaml", "--label_smoothing", "0.1"], construct=False)
    assert setting_of(load_recipe(["recipes/cdpo.yaml"], construct=False), "label_smoothing") == 0.1
    # another TRL loss that reads it (robust DPO) takes it
    robust = load_recipe(["recipes/dpo.yaml", "--loss_type", "[robust]", "--label_smoothing", "0.1"],
                         construct=False)
    assert setting_of(robust, "label_smoothing") == 0.1


@pytest.mark.parametrize("recipe, flag, value, says", [
    ("dpo_norm", "label_smoothing", "0.1", "does not read it"),
    ("dpo_norm", "loss_type", "[robust]", r"\(book_loss dpo_norm\), which replaces TRL's loss_type"),
    ("ipo", "loss_type", "[hinge]", r"\(book_loss ipo\), which replaces TRL's loss_type")])
def test_a_book_loss_refuses_what_it_would_ignore(recipe, flag, value, says):
    """BookDPOTrainer's recipes (dpo_norm, ipo, ...) run `book_loss`, which reads no TRL loss_type (dpo_norm's no
    label_smoothing either): a `--loss_type '[hinge]'` on ipo.yaml trained IPO without a word."""
    with pytest.raises(RecipeError, match=rf"^command line: `{flag}` .*{says}"):
        load_recipe([f"recipes/{recipe}.yaml", f"--{flag}", value], construct=False)
    assert setting_of(load_recipe([f"recipes/{recipe}.yaml"], construct=False), "book_loss") == recipe


def test_wrong_type_names_key_and_expected_type():
    message = _error(["recipes/dpo.yaml", "--learning_rate", "fast"])
    assert "command line" in message and "`learning_rate` must be float" in message and "'fast'" in message
    message = _error(["recipes/dpo.yaml", "--num_train_epochs", "[1, 2]"])
    assert "`num_train_epochs`" in message


def test_unknown_algorithm_lists_valid_names(tmp_path):
    path = _write(tmp_path, "algorithm: dpoo\n")
    message = _error([path])
    assert "unknown algorithm `dpoo`" in message and "Did you mean `dpo`?" in message
    for name in ("ipo", "kto", "simpo"):
        assert name in message


def test_missing_algorithm_and_missing_file(tmp_path):
    assert "missing required key `algorithm`" in _error([_write(tmp_path, "beta: 0.1\n")])
    assert "no such recipe file" in _error([str(tmp_path / "nope.yaml")])
    assert "must be a mapping" in _error([_write(tmp_path, "- a\n- b\n")])


def test_unknown_profile():
    assert "profile `huge` is unknown" in _error(["recipes/dpo.yaml", "--profile", "huge"])


@pytest.mark.parametrize("argv, flag", [
    (["--learning_rate"], "learning_rate"),  # last on the line
    (["--learning_rate", "--beta", "0.2"], "learning_rate"),  # followed by another flag
    (["--profile", "--learning_rate", "1e-5"], "profile"),  # ours: was "profile `true` is unknown"
    (["--output_dir"], "output_dir"),  # a text key: was taken as the folder `true`
    (["--report-to"], "report_to"),
])
def test_a_flag_without_its_value_is_one_line_naming_it(argv, flag):
    assert _error(["recipes/dpo.yaml", "--bf16", "false", *argv]) == (
        f"command line: `--{flag}` needs a value (--{flag} VALUE)")


def test_a_boolean_flag_alone_still_switches_it_on(tmp_path):
    r = load_recipe(["recipes/dpo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path), "--use_peft",
                     "--logging_first_step", "--overwrite", "--resume"])
    assert r.model.use_peft is True and r.training.logging_first_step is True and r.args.overwrite is True
    assert r.args.resume == "latest"
    import yaml

    assert yaml.safe_load(yaml.safe_dump(r.resolved))["use_peft"] is True  # config.yaml holds plain values


def test_command_line_values_are_typed_and_override_yaml(tmp_path):
    r = load_recipe(["recipes/dpo.yaml", "--learning_rate", "1e-6", "--beta=0.3", "--bf16", "false",
                     "--output_dir", str(tmp_path)])
    assert r.training.learning_rate == 1e-6 and r.training.beta == 0.3 and r.training.bf16 is False
    assert r.resolved["learning_rate"] == 1e-6


def test_effective_batch_sets_accumulation_from_world_size():
    one = load_recipe(["recipes/dpo.yaml", "--bf16", "false"], world_size=1)
    four = load_recipe(["recipes/dpo.yaml", "--bf16", "false"], world_size=4)
    assert one.training.gradient_accumulation_steps == 8 and four.training.gradient_accumulation_steps == 2
    for r, world in ((one, 1), (four, 4)):
        assert r.training.per_device_train_batch_size * r.training.gradient_accumulation_steps * world == 64


def test_effective_batch_that_does_not_divide_fails_clearly():
    message = _error(["recipes/dpo.yaml", "--per_device_train_batch_size", "3"])
    assert "effective_batch_size 64 is not divisible by per_device_train_batch_size 3" in message


def test_contradicting_accumulation_is_rejected():
    message = _error(["recipes/dpo.yaml", "--gradient_accumulation_steps", "2"])
    assert "contradicts effective_batch_size 64" in message


def test_bad_recipe_fails_before_any_model_loads(tmp_path, monkeypatch):
    import rlhf_recipes.models as models

    def boom(*a, **k):
        raise AssertionError("a model was loaded for an invalid recipe")

    monkeypatch.setattr(models, "load_causal_lm", boom)
    monkeypatch.setattr(models, "load_tokenizer", boom)
    path = _write(tmp_path, "algorithm: dpo\nmodel_name_or_path: tiny\ndataset: ultrafeedback\nbeta: high\n")
    assert run_recipe(path, tmp_path / "out", expect=2) == {}
    assert not (tmp_path / "out" / "config.yaml").exists()


def test_existing_run_is_not_overwritten_silently(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("algorithm: dpo\n")
    assert run_recipe("dpo.yaml", out, expect=2) == {}
    assert (out / "config.yaml").read_text() == "algorithm: dpo\n"


def test_a_start_into_a_finished_run_offers_a_new_folder_not_resume(tmp_path):
    """--resume on a finished run only says there is no checkpoint: the refusal offers what works for each kind."""
    from rlhf_recipes.run_setup import prepare_output_dir
    from rlhf_recipes.tools.preflight import _output_dir

    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("algorithm: dpo\n")
    recipe = load_recipe(["recipes/dpo.yaml", "--bf16", "false", "--output_dir", str(out)])
    for check in (prepare_output_dir, _output_dir):  # the runner, and preflight
        with pytest.raises(RecipeError, match="already holds a run. Continue it with --resume"):
            check(recipe)
    (out / "final_results.json").write_text('{"status": "finished"}')
    for check in (prepare_output_dir, _output_dir):
        with pytest.raises(RecipeError) as info:
            check(recipe)
        message = str(info.value)
        assert f"{out} already holds a finished run" in message and f"--output_dir {out}-rerun," in message
        assert "--overwrite" in message and "--resume" not in message and "\n" not in message
    (tmp_path / "run-rerun").mkdir()  # the first re-run's folder, taken: the next free name is offered
    with pytest.raises(RecipeError, match=f"--output_dir {out}-rerun2, or replace it"):
        prepare_output_dir(recipe)
    assert (out / "config.yaml").read_text() == "algorithm: dpo\n"


def test_resume_without_checkpoint_says_so(tmp_path):
    from rlhf_recipes.run_setup import prepare_output_dir

    recipe = load_recipe(["recipes/dpo.yaml", "--resume", "--bf16", "false", "--output_dir", str(tmp_path)])
    assert recipe.args.resume == "latest"
    with pytest.raises(RecipeError, match="no complete checkpoint in"):
        prepare_output_dir(recipe)
    # A checkpoint folder without the completion marker (killed mid-save) does not count.
    (tmp_path / "checkpoint-3").mkdir()
    with pytest.raises(RecipeError, match="no complete checkpoint in"):
        prepare_output_dir(recipe)


# ---------------------------------------------------------------------------------------
# Data adapters on real-schema rows


def _dataset(rows):
    from datasets import Dataset

    return Dataset.from_list(rows)


def test_hh_rlhf_adapter_on_real_rows():
    from rlhf_recipes.data.hh_rlhf import SOURCE

    rows = [json.loads(line) for line in (ROOT / "rlhf_recipes/data/fixtures/hh-rlhf/harmless-base-test.jsonl")
            .read_text().splitlines()]
    out = normalize_rows(_dataset(rows), SOURCE, "hh")
    assert len(out) > 0
    for row in out:
        assert row["prompt"][-1]["role"] == "user"
        assert row["chosen"][0]["role"] == "assistant" and row["rejected"][0]["role"] == "assistant"
        assert row["chosen"] != row["rejected"]
    first = rows[0]
    assert out[0]["prompt"][0]["content"] == first["chosen"].split("\n\nHuman: ")[1].split("\n\nAssistant: ")[0]


def test_hh_rlhf_malformed_row_is_named():
    from rlhf_recipes.data.hh_rlhf import SOURCE

    rows = [{"chosen": "\n\nHuman: hi\n\nAssistant: hello", "rejected": "\n\nHuman: hi\n\nAssistant: go away"},
            {"chosen": "no markers here", "rejected": "\n\nHuman: hi\n\nAssistant: x"}]
    with pytest.raises(DataError, match=r"row 2: column `chosen` must start with"):
        normalize_rows(_dataset(rows), SOURCE, "hh")


def test_identical_pairs_are_dropped_and_counted(caplog):
    from rlhf_recipes.data.hh_rlhf import SOURCE

    same = "\n\nHuman: hi\n\nAssistant: hello"
    rows = [{"chosen": same, "rejected": same},
            {"chosen": "\n\nHuman: hi\n\nAssistant: hello", "rejected": "\n\nHuman: hi\n\nAssistant: bye"}]
    with caplog.at_level("WARNING"):
        out = normalize_rows(_dataset(rows), SOURCE, "hh")
    assert len(out) == 1 and "dropped 1 of 2 rows" in caplog.text


def test_ultrafeedback_adapter_and_schema_errors():
    from rlhf_recipes.data.ultrafeedback import SOURCE

    good = json.loads((ROOT / "rlhf_recipes/data/fixtures/ultrafeedback/train.jsonl").read_text().splitlines()[0])
    out = normalize_rows(_dataset([good]), SOURCE, "uf")
    assert out[0]["prompt"] == [{"role": "user", "content": good["prompt"]}]
    assert out[0]["chosen"] == [good["chosen"][-1]]
    bad = {**good, "rejected": [{"role": "user", "content": "only one turn"}]}
    with pytest.raises(DataError, match=r"row 2: column `rejected` must be a list of at least 2 messages"):
        normalize_rows(_dataset([good, bad]), SOURCE, "uf")
    with pytest.raises(DataError, match=r"missing column\(s\) \['chosen'\]"):
        normalize_rows(_dataset([{"prompt": "x", "rejected": []}]), SOURCE, "uf")


def test_profiles_name_only_families_and_algorithms_that_exist():
    """recipes/profiles/*.yaml: a section names a registry family or algorithm (a typo there would silently apply
    nothing); an unknown profile is refused naming the files there are."""
    from rlhf_recipes.profiles import profile_names, read_profile
    from rlhf_recipes.registry import FAMILIES

    assert set(profile_names()) >= {"tiny", "nano"}
    for name in profile_names():
        profile = read_profile(name)
        assert set(profile.families) <= set(FAMILIES), name
        assert set(profile.algorithms) <= set(ALGORITHMS), name
    assert read_profile("tiny").runs("sft") and not read_profile("nano").runs("sft")
    with pytest.raises(RecipeError, match="profile `huge` is unknown; available: nano, tiny"):
        load_recipe([str(ROOT / "recipes" / "dpo.yaml"), "--profile", "huge"], construct=False)


def test_show_prints_what_the_run_trains_with_and_where_each_value_came_from(capsys):
    """`rlhf-recipes show recipes/dpo.yaml --profile nano`: beta 1.0 from the nano profile's family section (the recipe
    says the book's 0.1), lr from its direct-alignment section, accumulation derived; every value shown is the one
    the trainer's config holds (the runner's own resolution and the built config, not a second reading)."""
    from rlhf_recipes.show import main, settings

    argv = [str(ROOT / "recipes" / "dpo.yaml"), "--profile", "nano"]
    assert main(argv) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert lines["beta"].split()[1] == "1.0" and lines["beta"].endswith("profile nano (families.direct_alignment)")
    assert lines["learning_rate"].split()[1] == "1e-05"
    assert lines["learning_rate"].endswith("profile nano (families.direct_alignment)")
    assert lines["num_train_epochs"].endswith("dpo.yaml") and "derived" in lines["gradient_accumulation_steps"]
    assert lines["loss_type"].endswith("algorithm `dpo` defaults")
    recipe = load_recipe(argv, construct=False)
    rows, problem = settings(recipe)
    assert problem is None
    built = {"recipe": recipe.args, "model": recipe.model, "training": recipe.training}
    assert all(getattr(built[r.group], r.key) == r.value for r in rows)
    assert main([str(ROOT / "recipes" / "dpo.yaml"), "--profile", "nano", "--betta", "1"]) == 2
    assert "unknown option `--betta`" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# Models loaded as token classifiers (ORM, PRM, PPO's value model), and PPO's value_model_path


@pytest.fixture(scope="module")
def tiny_olmo2(tmp_path_factory) -> Path:
    """A saved OLMo-2 causal LM (the book's OLMo-2-0425-1B family) with the tiny tokenizer: transformers has no
    OLMo-2 token-classification class."""
    from transformers import AutoTokenizer, Olmo2Config, Olmo2ForCausalLM

    from rlhf_recipes.tiny import tiny_model_path

    folder = tmp_path_factory.mktemp("olmo2")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    config = Olmo2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    Olmo2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_model_without_a_token_classification_class_is_refused_before_loading(tiny_olmo2, tmp_path):
    """An ORM, a PRM or PPO's separate value model on OLMo-2 died in AutoModelForTokenClassification, for PPO after
    the policy and its reference had loaded."""
    from rlhf_recipes.validation import check_inputs

    def check(recipe: str, *extra: str) -> None:
        check_inputs(load_recipe([f"recipes/{recipe}", "--profile", "tiny", "--model_name_or_path", str(tiny_olmo2),
                                  "--output_dir", str(tmp_path / recipe), *extra], construct=False))

    for recipe, fix in (("orm.yaml", "pick a base model whose type has one"),
                        ("ppo.yaml", "set share_value_backbone: true")):
        with pytest.raises(RecipeError) as refused:
            check(recipe)
        message = str(refused.value)
        assert "is a olmo2 model, and transformers has no token-classification class for olmo2" in message
        assert "model_name_or_path" in message and fix in message and "\n" not in message
    check("ppo.yaml", "--share_value_backbone", "true")  # the value head on the policy's backbone: fine
    check("preference_rm.yaml")  # a sequence classifier: OLMo-2 has one


def test_ppo_value_model_path_is_checked_before_loading(tmp_path):
    from rlhf_recipes.validation import check_inputs

    def check(path: Path) -> None:
        check_inputs(load_recipe(["recipes/ppo.yaml", "--profile", "tiny", "--value_model_path", str(path),
                                  "--output_dir", str(tmp_path / "run")], construct=False))

    with pytest.raises(RecipeError, match=r"`value_model_path`: no such folder .*nowhere\. Name a saved model"):
        check(tmp_path / "nowhere")
    adapter_only = tmp_path / "rm-lora"
    adapter_only.mkdir()
    (adapter_only / "adapter_config.json").write_text("{}")
    with pytest.raises(RecipeError, match="holds a LoRA adapter but no merged model"):
        check(adapter_only)
