"""How a setting is read from its environment variable and checked: the kinds of value (a port, a memory size,
a cron expression, ...) and :class:`Group`, the frozen dataclass base whose fields each name their variable.

A value a kind does not allow stops with one readable line naming the variable (:class:`SettingsError`).
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, Self


class SettingsError(ValueError):
    """A setting is missing or invalid; the message is one line naming the setting."""


@dataclass(frozen=True)
class Kind:
    """How one kind of setting is read from its variable's text (stripped) and which values it allows.

    A value it does not allow stops with ``<VARIABLE> must <must>, got <value>``; text ``parse`` cannot read
    (it raises ValueError, ArithmeticError or LookupError) says ``unreadable`` instead, when given.
    """

    parse: Callable[[str], Any]
    ok: Callable[[Any], bool]
    must: str
    unreadable: str | None = None
    #: What the message shows of the variable's raw text.
    shown: Callable[[str], str] = lambda raw: raw
    #: Whether a variable set to blank text keeps the default (else the blank text is parsed).
    blank_is_default: bool = True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def choice(choices: tuple[str, ...]) -> Kind:
    return Kind(str, lambda v: v in choices, f"be one of {', '.join(choices)}", shown=str.strip)


def pattern(regex: str, must: str) -> Kind:
    return Kind(str, lambda v: isinstance(v, str) and re.fullmatch(regex, v) is not None, must, shown=str.strip)


def names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise ValueError(text)
    return names


def _optional_path(text: str) -> Path | None:
    """Set to blank text (or ``none``, ``off``), a path setting turns its feature off."""
    return None if text.lower() in {"", "none", "off"} else Path(text).expanduser().resolve()


_TRUTH = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
_SERVER = r"[A-Za-z0-9_.\-\[\]:]+:\d{1,5}"

POSITIVE_INT = Kind(int, lambda v: _is_int(v) and v > 0, "be a positive whole number", "be a whole number")
NON_NEGATIVE_INT = Kind(int, lambda v: _is_int(v) and v >= 0, "be zero or a positive whole number", "be a whole number")
PORT = Kind(int, lambda v: _is_int(v) and 1 <= v <= 65535, "be a port from 1 to 65535", "be a whole number")
NICENESS = Kind(int, lambda v: _is_int(v) and 0 <= v <= 19, "be a whole number from 0 to 19", "be a whole number")
BOOLEAN = Kind(lambda text: _TRUTH[text.lower()], lambda v: isinstance(v, bool), "be true or false")
CRON = Kind(
    lambda text: " ".join(text.split()),
    lambda v: isinstance(v, str) and len(v.split()) == 5 and all(re.fullmatch(r"[0-9*/,-]+", f) for f in v.split()),
    "be a five-field cron expression such as '*/15 * * * *'",
    shown=str.strip,
)
MEMORY = Kind(
    str.lower,
    lambda v: isinstance(v, str) and re.fullmatch(r"[0-9]+[mg]", v) is not None,
    "look like 512m or 4g",
    shown=lambda raw: raw.strip().lower(),
)
DATE = Kind(date.fromisoformat, lambda v: isinstance(v, date), "be a date like 2024-01-01")
DECIMAL = Kind(
    Decimal,
    lambda v: isinstance(v, Decimal) and v.is_finite(),
    "be a finite decimal number",
    "be a decimal number such as 1000000.00",
)
RATE = Kind(
    float,
    lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0.0 <= v <= 1.0,
    "be a fraction between 0 and 1 such as 0.05",
)
NAMES = Kind(
    names,
    lambda v: isinstance(v, tuple) and all(isinstance(n, str) and n.strip() for n in v),
    "be a comma-separated list such as 'purchase,click'",
)
PIPELINE_NAMES = Kind(
    lambda text: () if text.strip() == "all" else names(text),
    lambda v: isinstance(v, tuple) and all(isinstance(n, str) and n for n in v),
    "be all or a comma-separated list of declared pipelines such as 'purchases,readings'",
    shown=str.strip,
)
PATH = Kind(lambda text: Path(text).expanduser().resolve(), lambda v: isinstance(v, Path), "be a path")
OPTIONAL_PATH = Kind(
    _optional_path, lambda v: v is None or isinstance(v, Path), "be a path or none", blank_is_default=False
)
TEXT = Kind(str, lambda v: isinstance(v, str), "be text")
HOST = pattern(r"[A-Za-z0-9_.\-]+", "be a host name or an IP address such as 127.0.0.1")
SERVERS = pattern(rf"{_SERVER}(,{_SERVER})*", "be host:port[,host:port…]")
TOPIC = pattern(r"[A-Za-z0-9._-]{1,249}", "be a Kafka topic name such as 'events'")
OFFSETS = pattern(r"(?s)earliest|latest|\{.*", "be earliest, latest or Spark's JSON offsets")


def read(env: Mapping[str, str], name: str, kind: Kind, default: Any) -> Any:
    """The value of the variable ``name``: ``default`` when unset (or blank), else its text read and checked."""
    raw = env.get(name)
    if raw is None or (kind.blank_is_default and not raw.strip()):
        return default
    try:
        value = kind.parse(raw.strip())
    except (ValueError, ArithmeticError, LookupError):
        raise SettingsError(f"{name} must {kind.unreadable or kind.must}, got {kind.shown(raw)!r}") from None
    if not kind.ok(value):
        raise SettingsError(f"{name} must {kind.must}, got {kind.shown(raw)!r}")
    return value


def var(name: str, kind: Kind) -> dict[str, Any]:
    """A field's metadata: it is read from the variable ``name`` as ``kind`` says, and checked whenever its
    group is built."""
    return {"env": name, "kind": kind}


class Group:
    """A group of settings: its fields whose metadata is :func:`_var` are read by ``from_env`` and checked on
    construction (``__post_init__``, which groups extend with their rules across fields)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if "env" in f.metadata and not f.metadata["kind"].ok(value):
                raise SettingsError(f"{f.metadata['env']} must {f.metadata['kind'].must}, got {value!r}")

    @classmethod
    def _read_fields(cls, env: Mapping[str, str], **defaults: Any) -> dict[str, Any]:
        """The fields read from their variables, unset ones at their default (or the one given here)."""
        return {
            f.name: read(env, f.metadata["env"], f.metadata["kind"], defaults.get(f.name, f.default))
            for f in fields(cls)
            if "env" in f.metadata
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """Read and check the group's variables; unset ones keep their defaults."""
        return cls(**cls._read_fields(env))

    @classmethod
    def from_env_declared(cls, env: Mapping[str, str], declared: Mapping[str, Any]) -> Self:
        """Read and check the group's variables; unset ones keep the ``declared`` values (a spec's)."""
        return cls(**cls._read_fields(env, **declared))


#: ``local``, ``local[N]``, ``local[*]`` or a standalone master's ``spark://host:port``.
SPARK_MASTER = pattern(
    r"local(\[(\*|[1-9][0-9]*)\])?|spark://[A-Za-z0-9_.\-]+:\d{1,5}",
    "be local[*], local[N] or a standalone master such as spark://127.0.0.1:7077",
)
