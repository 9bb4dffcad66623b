"""Plots `embedwire-bench retrieval`'s retrieval.csv: nDCG@10 per store and mode
against the two yardsticks, and, where the alpha grid ran, nDCG@10 against alpha for
each fusion. Run by the scenario with the venv Python (matplotlib).

usage: python plot.py RESULTS_DIR
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(results):
    with open(f"{results}/retrieval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    measured = [r for r in rows if r["store"] != "yardstick" and r["alpha"] in ("", "default")]
    yardsticks = [r for r in rows if r["store"] == "yardstick"]
    grid = [r for r in rows if r["alpha"] not in ("", "default")]
    fig, axes = plt.subplots(1, 2 if grid else 1, figsize=(12 if grid else 7, 4.5), squeeze=False)
    bars = axes[0][0]
    labels = [f"{r['store']}\n{r['mode']}" for r in measured]
    colors = {"vector": "#4C72B0", "keyword": "#DD8452", "hybrid": "#55A868"}
    bars.bar(labels, [float(r["ndcg_at_10"]) for r in measured], color=[colors.get(r["mode"], "#999") for r in measured])
    for r, style in zip(yardsticks, ("--", ":")):
        bars.axhline(float(r["ndcg_at_10"]), linestyle=style, color="#333", label=r["mode"])
    bars.set_ylabel("nDCG@10")
    bars.set_ylim(0, 1)
    bars.set_title("Quality per store and mode (default alpha and fusion)")
    bars.legend(loc="lower right", fontsize=8)
    bars.tick_params(axis="x", labelsize=8)
    if grid:
        sweep = axes[0][1]
        for fusion in sorted({r["fusion"] for r in grid}):
            points = sorted((float(r["alpha"]), float(r["ndcg_at_10"])) for r in grid if r["fusion"] == fusion)
            sweep.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=fusion)
        sweep.set_xlabel("alpha (weight of the vector side)")
        sweep.set_ylabel("nDCG@10")
        sweep.set_title(f"Hybrid on {grid[0]['store']}: the defaults' grid")
        sweep.legend()
    fig.tight_layout()
    fig.savefig(f"{results}/retrieval.png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
