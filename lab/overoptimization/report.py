"""overoptimization.png and the printed tables, drawn from the result document (cli.py builds it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from rlhf_recipes.tools.document import pyplot, save_figure, table
from lab.overoptimization.formulas import gold_best_of_n, gold_rl

GOLD = "gold score (task's score_answer, 0-1)"
D = "d = sqrt(KL from the base)  [sqrt(nats)]"


def _interval(row: dict[str, Any], key: str) -> str:
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    return f"{row[key]:.3f}" + ("" if low is None else f" [{low:.3f}, {high:.3f}]")


def _fit_cell(f: dict[str, Any] | None) -> str:
    if f is None:
        return "too few points"
    if f.get("flat"):
        return "flat: the gold score never moved"
    peak = "no turn" if not math.isfinite(f["peak_d"]) else f"peak d={f['peak_d']:.2f}" + (
        "" if f["peak_in_range"] else " (beyond the data)")
    return f"alpha {f['alpha']:+.3f}, beta {f['beta']:+.3f}, R2 {f['r2']:.2f}; {peak}"


def tables(doc: dict[str, Any]) -> list:
    proxies = table("proxies: held-out pairwise accuracy against the gold ordering (95% t interval over problems)",
                    ("proxy", "recipe run", "pairwise accuracy", "problems with a pair"))
    for p in doc["proxies"]:
        a = p["pairwise_accuracy"]
        cell = "-" if a["mean"] is None else _interval({"x": a["mean"], "x_low": a["low"], "x_high": a["high"]}, "x")
        proxies.add_row(p["name"], p["run"], cell, str(a["problems"]))
    out = [proxies]
    for section, label, keys in (("best_of_n", "best-of-n from the base (KL analytic)", ("proxy_name", "n")),
                                 ("rl", "RL against the proxy (KL sampled)", ("proxy_name", "step")),
                                 ("direct_alignment", "direct alignment (KL sampled)", ("run", "step"))):
        t = table(f"{label}: gold and proxy scores, mean [95% t interval over problems]",
                  (*keys, "KL (nats)", "d", "gold", "proxy"))
        for r in doc[section]:
            t.add_row(*(str(r[k]) for k in keys), _interval(r, "kl") if "kl_low" in r else f"{r['kl']:.3f}",
                      f"{r['d']:.2f}", _interval(r, "gold"), _interval(r, "proxy") if "proxy" in r else "-")
        out.append(t)
    fits = table("fits of gold(d) - gold(0): best-of-n d(alpha - beta d), RL and direct alignment "
                 "d(alpha - beta log d); the turn seen: last step minus the best step [95% t over problems]",
                 ("kind", "curve", "fit", "best step (d)", "last - best"))
    for kind, curves in doc["fits"].items():
        for name, f in curves.items():
            seen = doc["turns"].get(kind, {}).get(name)
            best = "-" if seen is None else f"{seen['peak_step']} ({seen['peak_d']:.2f})"
            fits.add_row(kind, name, _fit_cell(f), best,
                         "-" if seen is None or seen["low"] is None else
                         f"{seen['last_minus_peak']:+.3f} [{seen['low']:+.3f}, {seen['high']:+.3f}]"
                         + (" falls" if seen["falls"] else ""))
    out.append(fits)
    return out


def _curve(axis, rows, key, color, label, marker="o", style="-"):
    axis.plot([r["d"] for r in rows], [r[key] for r in rows], style, marker=marker, markersize=3, color=color,
              label=label)
    if rows and f"{key}_low" in rows[0] and rows[0][f"{key}_low"] is not None:
        axis.fill_between([r["d"] for r in rows], [r[f"{key}_low"] for r in rows], [r[f"{key}_high"] for r in rows],
                          color=color, alpha=0.12)


def _fit_line(axis, rows, fit, form, color):
    if fit is None or not rows:
        return
    d = np.linspace(0, max(r["d"] for r in rows), 100)
    start = min(rows, key=lambda r: r["d"])["gold"]
    axis.plot(d, start + form(d, fit["alpha"], fit["beta"]), "--", color=color, linewidth=1)


def plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ((bon, rl), (proxy, direct)) = plt.subplots(2, 2, figsize=(14, 10))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, p in enumerate(doc["proxies"]):
        color, name = colors[i % len(colors)], p["name"]
        b = [r for r in doc["best_of_n"] if r["proxy_name"] == name]
        r = [x for x in doc["rl"] if x["proxy_name"] == name]
        _curve(bon, b, "gold", color, f"{name} (fit dashed)")
        _fit_line(bon, b, doc["fits"]["best_of_n"].get(name), gold_best_of_n, color)
        _curve(rl, r, "gold", color, f"{name} (fit dashed)")
        _fit_line(rl, r, doc["fits"]["rl"].get(name), gold_rl, color)
        if b:
            _curve(proxy, b, "proxy_z", color, f"{name}, best-of-n", marker="s", style=":")
        if r and "proxy_z" in r[-1]:
            _curve(proxy, r, "proxy_z", color, f"{name}, RL")
    for i, name in enumerate(dict.fromkeys(x["run"] for x in doc["direct_alignment"])):
        color, rows = colors[i % len(colors)], [x for x in doc["direct_alignment"] if x["run"] == name]
        _curve(direct, rows, "gold", color, name, marker="o" if name.startswith("dpo") else "^",
               style="-" if name.startswith("dpo") else "-.")
    bon.set(title="best-of-n from the base: the proxy's pick, n = 1, 2, 4, ...", xlabel=D, ylabel=GOLD)
    rl.set(title=f"RL ({doc['settings']['rl_algorithm']}) against the proxy, checkpoints", xlabel=D, ylabel=GOLD)
    proxy.set(title="proxy score of the same samples", xlabel=D,
              ylabel="proxy score [std of its scores on base samples, from their mean]")
    direct.set(title="direct alignment across beta (every step a checkpoint)", xlabel=D, ylabel=GOLD)
    for axis in (bon, rl, proxy, direct):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    save_figure(fig, path, f"Over-optimization on the {doc['profile']} profile: gold against proxy against KL "
                "(bands: 95% t interval over held-out problems; this project's CPU runs)")
