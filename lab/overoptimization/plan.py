"""What `rlhf-recipes overoptimization` runs under each profile, as jobs of the sweep's executor: normal recipe runs.

  proxies           reward models trained by their own recipes (the nano preference RM on a few amounts of the
                    nano pairs, the ORM on the nano base's rollouts): proxies of varied quality;
  rl                GRPO with `reward_funcs: [rm:<proxy>]` and weight 1 (the proxy alone: never the gold scorer,
                    no format reward), a checkpoint every `save_steps` so each step can be measured afterwards;
  direct_alignment  DPO and IPO on the nano pairs at several betas, a checkpoint every `save_steps`.
The nano profile sizes everything for this 2-core CPU (measure.py says what is measured on the checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proxy:
    name: str  # its folder under <out>/proxies, and its label
    algorithm: str  # its recipe: recipes/<algorithm>.yaml
    overrides: tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class Profile:
    name: str
    proxies: tuple[Proxy, ...]
    rl: tuple[str, ...]  # overrides of every RL run (steps, checkpoints)
    direct: tuple[tuple[str, tuple[float, ...]], ...]  # (algorithm, betas)
    direct_overrides: tuple[str, ...]
    problems: int  # held-out problems every measurement uses
    best_of_n_samples: int  # base samples per problem; best-of-n for n = 1, 2, 4, ... up to it
    samples: int  # samples per problem at each RL / direct-alignment checkpoint
    rl_algorithm: str = "grpo"
    seed: int = 0  # the sampling seed of every measurement

    @property
    def ns(self) -> list[int]:
        """1, 2, 4, ... up to best_of_n_samples."""
        return [2 ** i for i in range(self.best_of_n_samples.bit_length())]


PROFILES = {
    # Measured on this 2-core machine (docs/overoptimization.md): three proxies from ~1 minute each; GRPO 600 steps
    # (the nano GRPO's 400 and half again, so the gold score has room to turn); DPO / IPO at the nano profile's 200
    # steps. 128 held-out problems: 64 base samples each for best-of-n, 4 per checkpoint.
    "nano": Profile(
        "nano",
        proxies=(Proxy("preference_rm-1000", "preference_rm", ("--num_samples", "1000"),
                       "preference RM, pairs of 1000 prompts"),
                 Proxy("preference_rm-3000", "preference_rm", (), "preference RM, pairs of 3000 prompts"),
                 Proxy("orm", "orm", (), "ORM, 1000 prompts x 8 rollouts")),
        rl=("--max_steps", "600", "--save_strategy", "steps", "--save_steps", "50"),
        direct=(("dpo", (0.1, 0.3, 1.0, 3.0)), ("ipo", (0.1, 0.3, 1.0, 3.0))),
        direct_overrides=("--save_strategy", "steps", "--save_steps", "25"),
        problems=128, best_of_n_samples=64, samples=4),
    # The plumbing in seconds (the CI test): the tiny random model, one proxy, 4 GRPO steps, DPO at two betas. The
    # proxy reads 1024 tokens: the book's system prompt alone is hundreds of tiny-tokenizer tokens, and at its 256 the
    # completion was cut off, so every sample of a prompt scored the same.
    "tiny": Profile(
        "tiny",
        proxies=(Proxy("preference_rm", "preference_rm", ("--max_length", "1024"), "preference RM (tiny)"),),
        rl=("--max_steps", "4", "--save_strategy", "steps", "--save_steps", "1"),
        direct=(("dpo", (0.1, 1.0)),),
        direct_overrides=("--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2"),
        problems=8, best_of_n_samples=8, samples=2),
}


def proxy_folder(out: Path, proxy: Proxy) -> Path:
    return out / "proxies" / proxy.name


def rl_folder(out: Path, proxy: Proxy) -> Path:
    return out / "rl" / proxy.name


def direct_name(algorithm: str, beta: float) -> str:
    return f"{algorithm}-beta{beta:g}"


def direct_folder(out: Path, algorithm: str, beta: float) -> Path:
    return out / "direct_alignment" / direct_name(algorithm, beta)


def phases(profile: Profile, out: Path, workers: int) -> tuple[list, list]:
    """(first, second): the proxies must finish before the RL runs that read them start. The direct-alignment runs
    need no proxy; enough of them go with the RL runs to keep every worker busy there, the rest with the proxies."""
    from rlhf_recipes.paths import recipe_path
    from lab.executor import Job

    def run(algorithm: str, *overrides: str) -> tuple[str, ...]:
        return (str(recipe_path(algorithm)), "--profile", profile.name, *overrides)

    proxies = [Job(f"proxy/{p.name}", proxy_folder(out, p), run(p.algorithm, *p.overrides)) for p in profile.proxies]
    # GRPO against each proxy alone: `reward_funcs: [rm:<proxy>]`, weight 1
    rl = [Job(f"rl/{p.name}", rl_folder(out, p), run(profile.rl_algorithm, "--reward_funcs",
                                                      f"rm:{proxy_folder(out, p)}", "--reward_weights", "1.0",
                                                      *profile.rl)) for p in profile.proxies]
    direct = [Job(f"direct/{direct_name(a, b)}", direct_folder(out, a, b),
                  run(a, "--beta", f"{b:g}", *profile.direct_overrides)) for a, betas in profile.direct for b in betas]
    fill = min(len(direct), (-len(rl)) % workers)
    return proxies + direct[:len(direct) - fill], rl + direct[len(direct) - fill:]
