"""The test tier's two kinds of JVM (decision 73): this process's session generates code as a user's does;
the processes the tests start evaluate expressions interpreted (a cold JVM's warm-up, not their subject)."""

import pytest
from pyspark.sql import SparkSession

from tests.conftest import INTERPRETED
from warehouse.session import spark_conf
from warehouse.settings import Settings

pytestmark = pytest.mark.quick


def test_this_process_generates_code_and_the_processes_it_starts_interpret(spark: SparkSession) -> None:
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
    assert spark.range(10).selectExpr("sum(id * 2) AS s").first().s == 90
    started = spark_conf(Settings.from_env())["spark.driver.extraJavaOptions"].split()
    assert all(option in started for option in INTERPRETED.split()), started
