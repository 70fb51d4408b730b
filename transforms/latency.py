"""End-to-end latency of a batch: from each row's arrival (landing file or Kafka record) to the commit.

A batch function aggregates its rows' arrival instants (``arrival_figures``, in the aggregation it runs
anyway); the runner turns them into latencies once the batch's writes have committed
(``latencies``). Latency falls as arrival rises, so its 99th percentile comes from the arrivals' 1st.
"""

from pyspark.sql import Column
from pyspark.sql import functions as F

#: Figures a batch returns about its rows' arrivals (epoch seconds); the runner replaces them by latencies.
ARRIVAL_KEYS = ("arrived_p01", "arrived_p50", "arrived_min")


def arrival_quantiles(arrived: str | Column = "arrived_at") -> list[Column]:
    """Aggregations: (arrival 1st and 50th percentile as an array, earliest arrival), epoch seconds."""
    seconds = F.unix_micros(F.col(arrived) if isinstance(arrived, str) else arrived) / 1e6
    return [F.percentile_approx(seconds, [0.01, 0.5], 1000), F.min(seconds)]


def arrival_figures(quantiles: list[float] | None, earliest: float | None) -> dict[str, float]:
    """The batch's arrival figures from :func:`arrival_quantiles`' results (none when no row had one)."""
    if not quantiles or earliest is None:
        return {}
    return {"arrived_p01": float(quantiles[0]), "arrived_p50": float(quantiles[1]), "arrived_min": float(earliest)}


def latencies(figures: dict[str, float], committed_at: float) -> dict[str, float]:
    """Replace arrival figures by latency seconds at ``committed_at`` (epoch seconds, processing time)."""
    out = {key: value for key, value in figures.items() if key not in ARRIVAL_KEYS}
    if "arrived_min" in figures:
        out["latency_p50_seconds"] = round(committed_at - figures["arrived_p50"], 3)
        out["latency_p99_seconds"] = round(committed_at - figures["arrived_p01"], 3)
        out["latency_max_seconds"] = round(committed_at - figures["arrived_min"], 3)
    return out
