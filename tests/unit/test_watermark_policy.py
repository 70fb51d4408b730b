"""The windows stream's watermark policies (``transforms/gold/watermarks.py``) without Spark.

Rules (``WatermarkSettings``' docstring, docs/decisions.md 29): watermark = the largest event time seen
minus the delay, never moving back; the delay is fixed, or (adaptive) the largest per-batch observed lag
of the batches within the horizon of event time, clamped to [min, max], the fixed delay until a batch has
been observed; the idle policy moves the watermark on one second per second of processing time past the
idle time, at most the maximum advance beyond where events left it. Every figure below is worked out by
hand from those rules.
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from transforms.gold.watermarks import Watermark, idle_watermark, watermark_delay
from warehouse.settings import Settings


def at(clock: str) -> datetime:
    """2024-01-01 at ``clock`` (UTC)."""
    return datetime.fromisoformat(f"2024-01-01T{clock}+00:00")


def settings_with(tmp_path: Path, **env: str) -> Settings:
    """Settings from ``LAKEHOUSE_*`` variables only (names without the prefix, as keyword arguments)."""
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), **{f"LAKEHOUSE_{k}": v for k, v in env.items()}})


TWO_MINUTES = timedelta(seconds=120)
HOUR = timedelta(hours=1)


# --- Watermark.advance ---------------------------------------------------------------------------------


def test_a_first_batch_sets_the_max_and_the_watermark_delay_behind_it() -> None:
    mark = Watermark().advance(at("10:00:00"), TWO_MINUTES)
    assert mark == Watermark(at("10:00:00"), at("09:58:00"), ())


def test_a_batch_without_events_leaves_the_watermark_as_it_was() -> None:
    assert Watermark().advance(None, TWO_MINUTES) == Watermark()
    mark = Watermark(at("10:00:00"), at("09:58:00"))
    assert mark.advance(None, TWO_MINUTES) == mark


def test_a_batch_of_old_events_leaves_max_and_watermark_where_they_were() -> None:
    mark = Watermark(at("10:00:00"), at("09:58:00"))
    assert mark.advance(at("09:00:00"), TWO_MINUTES) == mark
    # An event exactly at the max changes nothing either.
    assert mark.advance(at("10:00:00"), TWO_MINUTES) == mark


def test_a_newer_batch_moves_both_on() -> None:
    mark = Watermark(at("10:00:00"), at("09:58:00")).advance(at("10:05:30"), TWO_MINUTES)
    assert mark == Watermark(at("10:05:30"), at("10:03:30"))


def test_a_longer_delay_never_moves_the_watermark_back() -> None:
    # max 10:00, watermark 09:58; the adaptive delay grows to 5 min with a batch at 10:01: 10:01 - 5 min = 09:56
    # would be behind 09:58, so the watermark stays while the max moves on.
    mark = Watermark(at("10:00:00"), at("09:58:00")).advance(at("10:01:00"), timedelta(minutes=5))
    assert mark == Watermark(at("10:01:00"), at("09:58:00"))
    # The next batch at 10:04 with the same delay gives 09:59: that is ahead, so it moves.
    assert mark.advance(at("10:04:00"), timedelta(minutes=5)).watermark == at("09:59:00")


def test_a_shorter_delay_moves_it_forward_from_the_max_seen() -> None:
    # max 10:00 with a 2-minute delay, then a batch of old events with a 10-second delay: 10:00 - 10 s.
    mark = Watermark(at("10:00:00"), at("09:58:00")).advance(at("09:30:00"), timedelta(seconds=10))
    assert mark == Watermark(at("10:00:00"), at("09:59:50"))


def test_advance_keeps_the_observed_lags() -> None:
    observed = ((at("09:59:00"), 12.0),)
    mark = Watermark(at("10:00:00"), at("09:58:00"), observed).advance(at("10:01:00"), TWO_MINUTES)
    assert mark.observed == observed


def test_a_zero_delay_puts_the_watermark_on_the_max() -> None:
    assert Watermark().advance(at("10:00:00.000001"), timedelta(0)).watermark == at("10:00:00.000001")


# --- Watermark.observe ---------------------------------------------------------------------------------


def test_observe_adds_batches_oldest_first_and_changes_nothing_else() -> None:
    start = Watermark(at("10:00:00"), at("09:58:00"))
    mark = start.observe(at("10:00:00"), 5.0, HOUR).observe(at("10:30:00"), 7.5, HOUR)
    assert mark.observed == ((at("10:00:00"), 5.0), (at("10:30:00"), 7.5))
    assert (mark.max_event_time, mark.watermark) == (start.max_event_time, start.watermark)


def test_observe_forgets_batches_more_than_the_horizon_behind_the_newest() -> None:
    mark = Watermark().observe(at("10:00:00"), 5.0, HOUR).observe(at("10:30:00"), 7.0, HOUR)
    # Exactly one hour behind the newest (11:00): still within the horizon.
    mark = mark.observe(at("11:00:00"), 3.0, HOUR)
    assert mark.observed == ((at("10:00:00"), 5.0), (at("10:30:00"), 7.0), (at("11:00:00"), 3.0))
    # A microsecond more: 10:00 goes.
    mark = mark.observe(at("11:00:00.000001"), 1.0, HOUR)
    assert mark.observed == ((at("10:30:00"), 7.0), (at("11:00:00"), 3.0), (at("11:00:00.000001"), 1.0))


def test_an_old_batch_is_forgotten_at_once_and_a_newer_one_is_the_horizon_s_anchor() -> None:
    mark = Watermark().observe(at("11:00:00"), 4.0, HOUR)
    # A batch whose max is 1 h 30 min behind the newest: outside the horizon, not kept.
    assert mark.observe(at("09:30:00"), 99.0, HOUR).observed == ((at("11:00:00"), 4.0),)
    # One within it (10:15) is kept, in arrival order, though older.
    assert mark.observe(at("10:15:00"), 6.0, HOUR).observed == ((at("11:00:00"), 4.0), (at("10:15:00"), 6.0))


# --- watermark_delay -------------------------------------------------------------------------------------


def test_the_fixed_policy_uses_the_fixed_delay_whatever_was_observed(tmp_path: Path) -> None:
    fixed = settings_with(tmp_path, WATERMARK_DELAY_SECONDS="45")
    observed = Watermark(at("10:00:00"), at("09:59:15"), ((at("10:00:00"), 300.0),))
    assert watermark_delay(fixed, observed) == timedelta(seconds=45)
    assert watermark_delay(settings_with(tmp_path), Watermark()) == timedelta(seconds=120)  # the default


def test_adaptive_before_any_observation_is_the_fixed_delay(tmp_path: Path) -> None:
    adaptive = settings_with(tmp_path, WATERMARK_POLICY="adaptive", WATERMARK_DELAY_SECONDS="45")
    assert watermark_delay(adaptive, Watermark()) == timedelta(seconds=45)
    assert watermark_delay(adaptive, Watermark(at("10:00:00"), at("09:59:15"))) == timedelta(seconds=45)


@pytest.mark.parametrize(
    ("lags", "expected_seconds"),
    [
        ((5.0, 40.0, 12.0), 40.0),  # the largest per-batch lag, not the newest nor a mean
        ((12.5,), 12.5),  # fractions of a second kept
        ((3.0, 4.0), 10.0),  # all below the minimum: the minimum
        ((10.0,), 10.0),  # exactly the minimum
        ((0.0,), 10.0),  # nothing late at all still waits the minimum
        ((600.0,), 600.0),  # exactly the maximum
        ((5.0, 5000.0), 600.0),  # above the maximum: the maximum
    ],
)
def test_adaptive_is_the_largest_observed_lag_clamped_to_min_and_max(
    tmp_path: Path, lags: tuple[float, ...], expected_seconds: float
) -> None:
    adaptive = settings_with(
        tmp_path,
        WATERMARK_POLICY="adaptive",
        WATERMARK_DELAY_SECONDS="45",
        WATERMARK_MIN_DELAY_SECONDS="10",
        WATERMARK_MAX_DELAY_SECONDS="600",
    )
    observed = tuple((at("10:00:00") + timedelta(minutes=i), lag) for i, lag in enumerate(lags))
    mark = Watermark(at("10:10:00"), at("10:09:15"), observed)
    assert watermark_delay(adaptive, mark) == timedelta(seconds=expected_seconds)


def test_adaptive_defaults_clamp_to_ten_seconds_and_fifteen_minutes(tmp_path: Path) -> None:
    adaptive = settings_with(tmp_path, WATERMARK_POLICY="adaptive")
    low = Watermark(at("10:00:00"), at("09:58:00"), ((at("10:00:00"), 1.0),))
    high = Watermark(at("10:00:00"), at("09:58:00"), ((at("10:00:00"), 3600.0),))
    assert watermark_delay(adaptive, low) == timedelta(seconds=10)
    assert watermark_delay(adaptive, high) == timedelta(seconds=900)


def test_forgotten_lags_no_longer_count(tmp_path: Path) -> None:
    adaptive = settings_with(tmp_path, WATERMARK_POLICY="adaptive", WATERMARK_HORIZON_SECONDS="3600")
    mark = Watermark().observe(at("10:00:00"), 300.0, HOUR).observe(at("10:30:00"), 20.0, HOUR)
    assert watermark_delay(adaptive, mark) == timedelta(seconds=300)
    mark = mark.observe(at("11:00:01"), 15.0, HOUR)  # 10:00 is now more than an hour behind
    assert watermark_delay(adaptive, mark) == timedelta(seconds=20)


# --- idle_watermark ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle_for_seconds", "advance_seconds"),
    [
        (0, 0),
        (30, 0),  # idle, but not for long enough yet
        (60, 0),  # exactly the idle time: not yet moving
        (61, 1),  # one second per second after it
        (60.5, 0.5),
        (60 + 1800, 1800),
        (60 + 3600, 3600),  # exactly the maximum advance
        (60 + 5000, 3600),  # capped
    ],
)
def test_idle_watermark_moves_one_second_per_second_past_the_idle_time_up_to_the_cap(
    tmp_path: Path, idle_for_seconds: float, advance_seconds: float
) -> None:
    idle = settings_with(tmp_path, WATERMARK_IDLE_SECONDS="60", WATERMARK_IDLE_MAX_ADVANCE_SECONDS="3600")
    left_by_events = at("09:58:00")
    input_at = datetime(2024, 3, 5, 12, 0, tzinfo=UTC)  # processing time has nothing to do with event time
    now = input_at + timedelta(seconds=idle_for_seconds)
    assert idle_watermark(idle, left_by_events, input_at, now) == left_by_events + timedelta(seconds=advance_seconds)


def test_idle_watermark_with_no_idle_time_follows_processing_time_at_once(tmp_path: Path) -> None:
    idle = settings_with(tmp_path, WATERMARK_IDLE_SECONDS="0", WATERMARK_IDLE_MAX_ADVANCE_SECONDS="100")
    input_at = datetime(2024, 3, 5, 12, 0, tzinfo=UTC)
    assert idle_watermark(idle, at("09:58:00"), input_at, input_at + timedelta(seconds=10)) == at("09:58:10")
    assert idle_watermark(idle, at("09:58:00"), input_at, input_at + timedelta(hours=1)) == at("09:59:40")


def test_idle_watermark_never_moves_back_when_the_clock_is_behind_the_last_input(tmp_path: Path) -> None:
    idle = settings_with(tmp_path, WATERMARK_IDLE_SECONDS="0")
    input_at = datetime(2024, 3, 5, 12, 0, tzinfo=UTC)
    assert idle_watermark(idle, at("09:58:00"), input_at, input_at - timedelta(seconds=30)) == at("09:58:00")


def test_idle_watermark_with_a_zero_cap_stays_put(tmp_path: Path) -> None:
    idle = settings_with(tmp_path, WATERMARK_IDLE_SECONDS="5", WATERMARK_IDLE_MAX_ADVANCE_SECONDS="0")
    input_at = datetime(2024, 3, 5, 12, 0, tzinfo=UTC)
    assert idle_watermark(idle, at("09:58:00"), input_at, input_at + timedelta(hours=2)) == at("09:58:00")
