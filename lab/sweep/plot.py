"""sweep.png: the key metric against the swept value, and each cell's curves as a mean over seeds with a band."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlhf_recipes.run_folder import read_metrics
from rlhf_recipes.tools.document import logs_window, points, pyplot, save_figure, seed_band


def curves(sweep_dir: Path, records: list[dict[str, Any]], metric: str) -> dict[str, dict[int, list[tuple]]]:
    """cell -> seed -> [(step, value)] of a metric logged in metrics.jsonl (finished runs)."""
    out: dict[str, dict[int, list[tuple]]] = {}
    for r in records:
        if r["status"] != "finished":
            continue
        logged = points(read_metrics(sweep_dir / r["folder"]), metric)
        if logged:
            out.setdefault(r["cell"], {})[r["seed"]] = logged
    return out


def plot(report: dict[str, Any], sweep_dir: Path, path: Path) -> None:
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()

    key, grid = report["key_metric"], report["sweep"]["grid"]
    training = report["training_metric"]
    heldout_curve = f"eval/{key.split('/', 1)[1]}" if key and "/" in key else None
    train_curves = curves(sweep_dir, report["runs"], training)
    eval_curves = curves(sweep_dir, report["runs"], heldout_curve) if heldout_curve else {}
    panels = 2 + bool(eval_curves)
    fig, axes = plt.subplots(1, panels, figsize=(6.2 * panels, 4.8))

    # 1. The key metric against the first swept key; a line per combination of the other keys.
    axis = axes[0]
    first = next(iter(grid), None)
    xs = grid[first] if first else ["default"]
    groups: dict[str, list[dict]] = {}
    for cell in report["cells"]:
        rest = ",".join(f"{k}={v}" for k, v in cell["params"].items() if k != first)
        groups.setdefault(rest, []).append(cell)
    for n, (rest, cells) in enumerate(groups.items()):
        offset = (n - (len(groups) - 1) / 2) * 0.08  # side by side, not on top of each other
        points = []
        for cell in cells:
            stats = cell["metrics"].get(key)
            if not stats:
                continue
            x = xs.index(cell["params"][first]) if first else 0
            seeds = list(stats["per_seed"].values())
            axis.scatter([x + offset] * len(seeds), seeds, s=14, alpha=0.45, color=f"C{n}",
                         label="each seed" if not points and n == 0 else None)
            points.append((x + offset, stats))
        points.sort(key=lambda p: p[0])
        if points:
            mean = [p[1]["mean"] for p in points]
            low = [p[1]["mean"] - p[1]["low"] if p[1]["low"] is not None else 0 for p in points]
            high = [p[1]["high"] - p[1]["mean"] if p[1]["high"] is not None else 0 for p in points]
            # the interval the table and sweep.json give (report.aggregate), named as they name it
            over = " / ".join(sorted({p[1].get("over", "seeds") for p in points if p[1]["low"] is not None}))
            axis.errorbar([p[0] for p in points], mean, yerr=[low, high], marker="o", capsize=4, color=f"C{n}",
                          label=(rest or "mean") + (f" (95% interval over {over})" if over else " (one seed)"))
    axis.set_xticks(range(len(xs)), xs)
    meaning = {"gain": "\n(evaluated minus baseline, same held-out problems)", "heldout": "\n(held-out evaluation)",
               "final": "\n(last logged training value)"}.get((key or "").split("/")[0], "")
    axis.set(xlabel=first or "cell", ylabel=(key or "no finished run") + meaning, title=f"{key} by cell")
    if key and key.startswith("gain/"):
        axis.axhline(0, color="grey", lw=0.8, ls="--")

    # 2-3. Curves: the training metric and the periodic held-out metric, per cell. The training curve is a running
    # mean only for long runs (logs_window): on a short run it would end far from the last log, the `final/` number
    # of the table (2 logs 0 and 0.75: a running mean ending at 0.375 beside a table's 0.75).
    window = logs_window(pts for per_seed in train_curves.values() for pts in per_seed.values())
    for axis, data, metric, smooth in ((axes[1], train_curves, training, window),
                                       *(((axes[2], eval_curves, heldout_curve, 1),) if eval_curves else ())):
        for n, (cell, per_seed) in enumerate(data.items()):
            steps, mean, low, high = seed_band(per_seed, smooth)
            band = "; band: min to max" if len(per_seed) > 1 else ""
            axis.plot(steps, mean, color=f"C{n % 10}", label=f"{cell} (mean of {len(per_seed)} seeds{band})")
            if len(per_seed) > 1:
                axis.fill_between(steps, low, high, color=f"C{n % 10}", alpha=0.18)
        training_panel = axis is axes[1]
        how = (f"\n(running mean of {smooth} logs; the table's final/ is the last log)" if smooth > 1 else
               "\n(every log; the table's final/ is the last)" if training_panel else "")
        axis.set(xlabel="optimizer step", ylabel=metric + how,
                 title="training curve" if training_panel else "periodic held-out evaluation")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    for axis in axes:
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7)
    sweep = report["sweep"]
    profile = f" ({sweep['profile']})" if sweep["profile"] else ""
    save_figure(fig, path, f"sweep: {Path(sweep['recipe']).name}{profile}, seeds {', '.join(map(str, sweep['seeds']))}")
