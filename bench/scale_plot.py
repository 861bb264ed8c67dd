"""The scale-out plot, drawn from bench_scale.py's JSON report (matplotlib only).

bench_scale.py draws it after a run (``docs/scale.png``); the documentation site's build
draws it again from the committed ``docs/scale.json``, so the site's figure is the report's.

    python bench/scale_plot.py docs/scale.json docs/scale.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

STYLES = {
    "pg_async": ("tab:blue", "-"),
    "pg": ("tab:blue", "--"),
    "mariadb_async": ("tab:orange", "-"),
    "mariadb": ("tab:orange", "--"),
    "redis": ("tab:red", ":"),
}


def plot(report: dict[str, Any], path: Path) -> None:
    """Throughput against N per config (one publisher, a panel per prefetch), Redis beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = report["cells"]
    prefetches = sorted({c["prefetch"] for c in cells})
    fig, axes = plt.subplots(1, len(prefetches), figsize=(5 * len(prefetches), 4), sharey=True)
    if len(prefetches) == 1:
        axes = [axes]
    for ax, prefetch in zip(axes, prefetches, strict=True):
        for config in report["configs"]:
            points = sorted(
                (c["consumers"], c["rate"])
                for c in cells
                if c["config"] == config
                and c["prefetch"] == prefetch
                and c["publishers"] == 1
                and c["rate"] == c["rate"]  # NaN: the cell did not finish
            )
            if points:
                color, style = STYLES.get(config, ("gray", "-"))
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, color=color, marker="o", label=config)
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8, 16, 32], labels=["1", "2", "4", "8", "16", "32"])
        ax.set_xlabel("consumer processes")
        ax.set_title(f"prefetch {prefetch}, 1 publisher")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("messages/s, end to end")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"{report['machine']} — commit {report['commit']} ({report['date']})", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_file(report_json: Path, png: Path) -> None:
    """Draw ``png`` from a saved report."""
    plot(json.loads(report_json.read_text(encoding="utf-8")), png)


if __name__ == "__main__":
    plot_file(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"plot written to {sys.argv[2]}")
