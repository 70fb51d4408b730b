"""``lakehouse generate``: synthetic lines for the purchases stream or any declared pipeline, into its landing
zone or the Kafka topic (``devtools.synthetic`` and ``devtools.spec_lines`` write them)."""

from datetime import datetime
from typing import Annotated

import typer

from cli import render
from cli.common import console, fails_in_one_line
from cli.common import home_settings as _settings


@fails_in_one_line
def generate(
    events: Annotated[
        int, typer.Option(help="Valid events (first arrivals) to generate; --kind orders: orders.")
    ] = 5000,
    users: Annotated[int, typer.Option(help="Distinct users.")] = 50,
    skew: Annotated[float, typer.Option(help="Zipf exponent of user popularity (0 = uniform).")] = 1.1,
    rate: Annotated[
        float | None,
        typer.Option(help="Events per second of event time (default 20; --kind orders: orders per second, default 1)."),
    ] = None,
    disorder: Annotated[float, typer.Option(help="Bounded disorder: max seconds an event time moves back.")] = 30.0,
    duplicates: Annotated[float, typer.Option(help="Fraction of events redelivered (a fifth conflicting).")] = 0.05,
    late: Annotated[float, typer.Option(help="Fraction of events far behind the watermark.")] = 0.02,
    invalid: Annotated[float, typer.Option(help="Fraction of invalid lines mixed in.")] = 0.02,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same lines.")] = 7,
    files: Annotated[int, typer.Option(help="Spread the lines over this many landing files.")] = 4,
    to: Annotated[str, typer.Option(help="landing (files in the landing zone) or kafka (the topic).")] = "landing",
    send_rate: Annotated[
        float, typer.Option(help="kafka: messages per second of wall-clock time (0 = as fast as it takes them).")
    ] = 0.0,
    start: Annotated[
        datetime, typer.Option(help="Event time of the first event (UTC).", formats=["%Y-%m-%dT%H:%M:%S"])
    ] = datetime(2024, 1, 1),
    kind: Annotated[
        str,
        typer.Option(
            help="events (purchases, clicks, refunds, views) or orders (orders and their payments, for "
            "gold.order_payments; --late and --invalid do not apply)."
        ),
    ] = "events",
    missing_payments: Annotated[float, typer.Option(help="--kind orders: fraction of orders never paid.")] = 0.1,
    outside_bound: Annotated[
        float,
        typer.Option(help="--kind orders: fraction of orders paid only outside the 15 minutes after the order."),
    ] = 0.05,
    pipeline: Annotated[
        str | None,
        typer.Option(
            "--pipeline",
            "-p",
            help="The declared pipeline to write for (default: the purchases stream); from its spec.",
        ),
    ] = None,
) -> None:
    """Write a synthetic event stream into the landing zone or a Kafka topic (deterministic for a seed)."""
    from datetime import UTC

    from devtools.synthetic import StreamSpec, generate_lines, generate_order_lines
    from runtime.sources.landing import place_in_landing

    if kind not in {"events", "orders"}:
        raise ValueError(f"--kind must be events or orders, got {kind!r}")
    settings = _settings()
    if pipeline is not None:
        settings = settings.for_pipeline(pipeline)
        settings.ensure_home()
        if kind == "orders" and settings.pipeline is not None:
            raise ValueError("--kind orders writes the purchases stream's orders and payments; leave --pipeline out")
    spec = StreamSpec(
        events=events,
        users=users,
        skew=skew,
        rate=rate if rate is not None else (1.0 if kind == "orders" else 20.0),
        disorder_seconds=disorder,
        duplicate_fraction=duplicates,
        late_fraction=late,
        invalid_fraction=invalid,
        seed=seed,
        start=start.replace(tzinfo=UTC),
        missing_payment_fraction=missing_payments,
        outside_bound_fraction=outside_bound,
    )
    spec.validate()
    if files < 1:
        raise ValueError("--files must be at least 1")
    if to not in {"landing", "kafka"}:
        raise ValueError(f"--to must be landing or kafka, got {to!r}")
    if send_rate < 0:
        raise ValueError("--send-rate must be 0 or more")
    if settings.pipeline is not None:
        from devtools.spec_lines import SpecStream, spec_lines

        stream = SpecStream(
            events=events, keys=users, rate=spec.rate, disorder_seconds=disorder, duplicate_fraction=duplicates,
            late_fraction=late, invalid_fraction=invalid, seed=seed, start=spec.start,
        )  # fmt: skip
        lines = list(spec_lines(settings.spec, stream))
    else:
        lines = list(generate_order_lines(spec) if kind == "orders" else generate_lines(spec))
    what = f"{events} orders with their payments" if kind == "orders" else f"{events} events"
    if to == "kafka":
        from runtime.sources.kafka_client import produce_lines

        with render.count_progress(console, "sending") as progress:
            task = progress.add_task("messages", total=len(lines))
            sent = produce_lines(settings, lines, send_rate, lambda n: progress.advance(task, n))
        console.print(
            f"sent {sent} messages ({what}) to {settings.kafka.topic} at {settings.kafka.bootstrap_servers}",
            highlight=False,
        )
        return
    per_file = -(-len(lines) // files) if lines else 0
    with render.count_progress(console, "generating") as progress:
        task = progress.add_task("lines", total=len(lines))
        for number in range(files):
            chunk = lines[number * per_file : (number + 1) * per_file]
            if not chunk:
                break
            place_in_landing(
                settings,
                f"synthetic-{'orders-' if kind == 'orders' else ''}seed{seed}-part{number:04d}.jsonl",
                lambda handle, chunk=chunk: handle.writelines(line + "\n" for line in chunk),
            )
            progress.advance(task, len(chunk))
    console.print(f"wrote {len(lines)} lines ({what}) to {settings.landing_dir}", highlight=False, soft_wrap=True)
