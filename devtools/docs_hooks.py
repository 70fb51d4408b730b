"""MkDocs hooks of the docs site (``mkdocs.yml``): the benchmark plots are served from ``bench/results/``, where the
benchmarks write them, instead of being copied into ``docs/``."""

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def on_files(files: Files, config: Any) -> Files:
    """Each ``bench/results/*.png`` appears in the site as ``benchmarks/<name>.png``."""
    for plot in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{plot.name}", abs_src_path=str(plot)))
    return files
