#!/usr/bin/env bash
# Set-up: the venv with the pinned stack and the `lakehouse` command, and the JVM jars Spark needs,
# fetched once into the git-ignored .cache/. Idempotent: a second run downloads and rebuilds nothing.
# It installs nothing into the system: the machine brings Python 3.11, Java 17+ and (once, for the jars)
# Maven, and is told in one line which is missing. Debian packages only the tests need are
# scripts/system-packages.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

fail() { echo "setup: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 || fail "Python 3.11 is required but neither 'python3.11' nor 'python3' is on PATH"
command -v java >/dev/null 2>&1 || fail "Java 17 or newer is required but 'java' is not on PATH"
java_major=$(java -version 2>&1 | sed -nE 's/.*version "([0-9]+).*/\1/p' | head -n1)
[ -n "$java_major" ] && [ "$java_major" -ge 17 ] || fail "Java 17 or newer is required, found: $(java -version 2>&1 | head -n1)"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
  || fail "Python 3.11 is required, found $("$PYTHON" --version 2>&1)"

UV_VERSION=0.13.9
stamp_of() { cat pyproject.toml requirements.lock scripts/setup.sh | sha256sum | cut -d' ' -f1; }

mkdir -p .cache

# The JVM's jars, each set fetched once by Maven into a git-ignored folder of .cache/ (its pom under jvm/):
#   jars           Delta's jars and their runtime dependencies that pyspark does not already ship
#   s3-jars        Hadoop's S3A and the AWS SDK modules it uses (13 MB), for tables on object storage
#                  (LAKEHOUSE_STORAGE_URI); a session adds them to Spark only then
#   kafka-broker   Apache Kafka's broker for `lakehouse kafka up`, never on Spark's class path
fetch_jars() {
  local folder=$1 pom=$2 what=$3 stamp
  stamp=$(sha256sum "$pom" | cut -d' ' -f1)
  [ "$(cat ".cache/$folder/.fetched" 2>/dev/null)" != "$stamp" ] || return 0
  command -v mvn >/dev/null 2>&1 || fail "Maven ('mvn') is needed once to fetch $what"
  rm -rf ".cache/$folder.partial" && mkdir -p ".cache/$folder.partial"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$ROOT/.cache/$folder.partial" \
    || fail "could not fetch $what with Maven (see the output above)"
  rm -rf ".cache/$folder" && mv ".cache/$folder.partial" ".cache/$folder"
  echo "$stamp" > ".cache/$folder/.fetched"
}
# Maven's downloads go on beside the Python stack's install (one uses the network and the JVM, the other uv's
# cache and every core for the bytecode); the three Maven runs one after another, as they share ~/.m2.
(
  fetch_jars jars jvm/pom.xml "the Delta jars"
  fetch_jars s3-jars jvm/s3/pom.xml "the S3A jars"
  fetch_jars kafka-broker jvm/kafka-broker/pom.xml "the Kafka broker's jars"
) &
maven=$!

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if [ "$(cat .venv/.installed 2>/dev/null)" != "$(stamp_of)" ]; then
  # uv links the stack from its cache (pyspark's wheel built from its source archive once) and compiles the
  # bytecode ahead on every core: where PYTHONDONTWRITEBYTECODE is set, Python would otherwise compile every
  # module it imports again in every process.
  .venv/bin/pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  # requirements.lock pins every transitive package to the audited set (`make audit`; `make lock` renews it).
  .venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python -e '.[dev]' -c requirements.lock
  stamp_of > .venv/.installed
fi
wait "$maven" || exit 1

# The driver JVM's class-data archive (AppCDS: ~3.5 s off every Spark start), rebuilt when the JVM, the jars or
# the stack change. Optional: without it Spark starts the slow way.
archive_stamp=$( { java -version 2>&1; cat pyproject.toml scripts/class_archive.py .cache/jars/.fetched; } | sha256sum | cut -d' ' -f1)
if [ "${1:-}" = --without-class-archive ]; then
  # The demo's: the archive costs about a minute to build and saves 3.5 s per Spark start, of which the demo
  # has three. Any other target builds it.
  [ "$(cat .cache/jvm/.built 2>/dev/null)" = "$archive_stamp" ] \
    || echo "setup: the JVM class archive is left for \`make setup\` (about a minute; 3.5 s off each Spark start)"
elif [ "${LAKEHOUSE_JVM_CLASS_ARCHIVE-unset}" = unset ] && [ "$(cat .cache/jvm/.built 2>/dev/null)" != "$archive_stamp" ]; then
  echo "setup: building the JVM class archive (once, about a minute)"
  rm -f .cache/jvm/spark-classes.jsa .cache/jvm/.built
  if .venv/bin/python scripts/class_archive.py .cache/jvm/spark-classes.jsa >.cache/class-archive.log 2>&1; then
    echo "$archive_stamp" > .cache/jvm/.built
  else
    echo "setup: could not build the JVM class archive (see .cache/class-archive.log); Spark starts without it" >&2
  fi
fi
echo "setup: ready (.venv, $(ls .cache/jars/*.jar | wc -l) jars, Kafka broker in .cache/kafka-broker)"
