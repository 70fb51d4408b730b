"""``lakehouse kafka``, ``cluster`` and ``postgres``: the local servers a newcomer starts without installing
anything (a Kafka broker, a Spark standalone cluster, PostgreSQL for Dagster), on 127.0.0.1, their files under
the home."""

from typing import Annotated

import typer

from cli import render
from cli.common import console, fails_in_one_line, home_settings, print_json

kafka_app = typer.Typer(
    name="kafka",
    help="A local single-node Kafka broker (KRaft) on 127.0.0.1, its data and logs under LAKEHOUSE_HOME/kafka.",
    no_args_is_help=True,
)


@kafka_app.command("up")
@fails_in_one_line
def kafka_up() -> None:
    """Start the broker (unless it runs), wait until it answers, create the topic if missing."""
    from devtools.broker import up

    settings = home_settings()
    host, port = settings.kafka.broker_address
    with console.status(f"starting the Kafka broker on {host}:{port}"):
        started = up(settings)
    state = "started" if started else "already running"
    console.print(
        f"Kafka broker {state} on {host}:{port}; topic {settings.kafka.topic} ready "
        f"(data and logs in {settings.kafka_dir})",
        highlight=False,
    )


@kafka_app.command("down")
@fails_in_one_line
def kafka_down() -> None:
    """Stop the broker cleanly; fine when none runs."""
    from devtools.broker import down

    settings = home_settings()
    console.print("Kafka broker stopped" if down(settings) else "no Kafka broker was running", highlight=False)


@kafka_app.command("status")
@fails_in_one_line
def kafka_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only.")] = False,
) -> None:
    """The broker, its topics, partitions, end offsets and the lakehouse's lag per partition."""
    from devtools.broker import broker_pid
    from runtime.sources.kafka_client import topics

    settings = home_settings()
    pid = broker_pid(settings)
    try:
        states = topics(settings, timeout=5)
    except Exception:
        states = None  # nothing answers
    report = render.kafka_report(settings.kafka, pid, states)
    if as_json:
        print_json(report)
        return
    render.print_kafka_status(console, report)


cluster_app = typer.Typer(
    name="cluster",
    help="A local Spark standalone cluster (a master and its workers) on 127.0.0.1, its files under "
    "LAKEHOUSE_HOME/cluster; runs use it with LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:7077.",
    no_args_is_help=True,
)


@cluster_app.command("up")
@fails_in_one_line
def cluster_up() -> None:
    """Start the master and the workers that do not run; wait until the master counts every worker alive."""
    from devtools.cluster import up

    settings = home_settings()
    cluster = settings.cluster
    with console.status(f"starting a Spark master and {cluster.workers} workers on 127.0.0.1"):
        started = up(settings)
    console.print(
        f"Spark cluster {'started' if started else 'already running'}: {cluster.master_url}, "
        f"UI http://127.0.0.1:{cluster.ui_port}\n"
        f"{cluster.workers} workers of {cluster.worker_cores} cores and {cluster.worker_memory}\n"
        f"run on it with LAKEHOUSE_SPARK_MASTER={cluster.master_url}\n"
        f"logs in {settings.cluster_dir / 'logs'}",
        highlight=False,
    )


@cluster_app.command("down")
@fails_in_one_line
def cluster_down() -> None:
    """Stop the workers (and their executors), then the master; fine when none runs."""
    from devtools.cluster import down

    console.print("Spark cluster stopped" if down(home_settings()) else "no Spark cluster was running", highlight=False)


@cluster_app.command("status")
@fails_in_one_line
def cluster_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only.")] = False,
) -> None:
    """The master, its workers (cores and memory used) and the applications running on it."""
    from devtools.cluster import status

    report = status(home_settings())
    if as_json:
        print_json(report)
        return
    if not report["running"]:
        console.print(f"no Spark cluster answers at {report['ui']} (start one: lakehouse cluster up)", highlight=False)
        return
    console.print(f"Spark master {report['master_url']} (UI {report['ui']})", highlight=False)
    for worker in report["workers"]:
        console.print(
            f"  {worker['id']}: {worker['state']}, cores {worker['coresused']}/{worker['cores']}, "
            f"memory {worker['memoryused']}/{worker['memory']} MB",
            highlight=False,
        )
    for application in report["applications"]:
        console.print(
            f"  application {application['id']} {application['name']}: {application['cores']} cores",
            highlight=False,
        )


postgres_app = typer.Typer(
    name="postgres",
    help="A local PostgreSQL on 127.0.0.1 for Dagster's instance storage (LAKEHOUSE_DAGSTER_STORAGE=postgres), "
    "its files under LAKEHOUSE_HOME/postgres; the password comes from LAKEHOUSE_DAGSTER_PG_PASSWORD.",
    no_args_is_help=True,
)


@postgres_app.command("up")
@fails_in_one_line
def postgres_up() -> None:
    """Create the server once, start it (unless it runs) and Dagster's database."""
    from devtools.postgres import up

    settings = home_settings()
    dagster = settings.dagster
    with console.status(f"starting PostgreSQL on 127.0.0.1:{dagster.pg_port}"):
        started = up(settings)
    console.print(
        f"PostgreSQL {'started' if started else 'already running'} on 127.0.0.1:{dagster.pg_port}, "
        f"database {dagster.pg_database} for user {dagster.pg_user}\n"
        "Dagster uses it with LAKEHOUSE_DAGSTER_STORAGE=postgres (make ui)\n"
        f"data and log in {settings.postgres_dir}",
        highlight=False,
    )


@postgres_app.command("down")
@fails_in_one_line
def postgres_down() -> None:
    """Stop the server (open sessions are ended); fine when none runs."""
    from devtools.postgres import down

    console.print("PostgreSQL stopped" if down(home_settings()) else "no PostgreSQL was running", highlight=False)


@postgres_app.command("status")
@fails_in_one_line
def postgres_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only.")] = False,
) -> None:
    """Whether this home's server runs, its address, database, user and folder (never the password)."""
    from devtools.postgres import status

    report = status(home_settings())
    if as_json:
        print_json(report)
        return
    state = "running" if report["running"] else "not running"
    console.print(
        f"PostgreSQL {state} at {report['address']}: database {report['database']}, user {report['user']}\n"
        f"folder {report['folder']}",
        highlight=False,
    )
