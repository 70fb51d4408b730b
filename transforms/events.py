"""A pipeline's event rules as Spark column expressions: parse, type and validate one raw line.

The rules come from the pipeline's spec (``warehouse.pipelines``): each declared field's type and rules, in
the spec's order, after the rules every line keeps (UTF-8, not too long, one JSON object). The contract's
purchases events (§1) are the first spec's. Each line is parsed once into a VARIANT (Spark's JSON parser);
the JSON type of every field is read from the variant, so a number is never confused with a string that
looks like one. A decimal never passes through a float: its decimal text is cast to decimal(p,s), and only
values whose exact value fits (at most p-s integer and s fractional digits) are accepted.
"""

from collections.abc import Callable
from decimal import Decimal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from warehouse.pipelines import FieldSpec, PipelineSpec, first_spec

#: The rules every line keeps before any field is read, in the order they are checked.
LINE_REASONS: dict[str, str] = {
    "not_utf8": "the line's bytes are not UTF-8 (bronze keeps them in raw_bytes)",
    "line_too_long": "the line is longer than LAKEHOUSE_MAX_LINE_BYTES; it is kept but never parsed",
    "empty_line": "the line is empty or only JSON white space (space, tab, CR, LF)",
}
_DOCUMENT_REASONS: dict[str, str] = {
    "not_json": (
        "the line is not one JSON value: invalid JSON, content after the value, a repeated key, a string with"
        " an unpaired surrogate escape, or arrays and objects nested over 999 deep"
    ),
    "not_object": "the JSON value is not an object",
}
#: What each field rule's reason says, by the rule's suffix (``{field}_{suffix}``).
_FIELD_RULES: dict[str, str] = {
    "missing": "{f} is absent or null",
    "not_string": "{f} is not a JSON string",
    "empty": "{f} is an empty or blank string",
    "too_long": "{f} is longer than {max_length} characters",
    "no_match": "{f} does not match the pattern {pattern}",
    "not_allowed": "{f} is not one of the allowed values ({allowed})",
    "wrong_type": "{f} is {wrong_type}",
    "invalid": "{f} is not {time_formats}, or its UTC instant is outside the years 1-9999",
    "not_finite": "{f} is NaN, Infinity or -Infinity (a bare literal, not JSON, or beyond a double)",
    "not_number": "{f} is not a JSON number (a string, boolean, object or array)",
    "not_exact": "{f} is in exponent notation or has over 38 digits, and the line's text does not tell its one "
    "exact value (its key spelt another way, or nested values of the same double)",
    "out_of_range": "{f} has more than {whole} integer digits (however written), so it does not fit {type}",
    "too_precise": "{f} has more than {scale} fractional digits, so it is not exact in {type}",
    "not_integer": "{f} is not a JSON integer of at most 64 bits",
    "not_boolean": "{f} is not true or false",
    "below_min": "{f} is below {min}",
    "above_max": "{f} is above {max}",
}
_TIME_FORMATS = {
    "iso8601": "an ISO-8601 date-time",
    "epoch_seconds": "epoch seconds",
    "epoch_millis": "epoch milliseconds",
}


def field_rules(name: str, f: FieldSpec, spec: PipelineSpec, lenient: bool = False) -> list[str]:
    """The rule suffixes a field's values are checked against, in order: the ones that quarantine a line (none
    for a field left null instead), or with ``lenient`` the ones that leave such a field null."""
    if f.on_invalid == "null" and not lenient:
        return []
    rules = ["missing"] if f.required else []
    if f.kind == "string":
        rules += ["not_string", *(["empty"] if f.not_blank else [])]
        rules += [r for r, on in (("too_long", f.max_length), ("no_match", f.pattern)) if on is not None]
    elif f.kind == "timestamp":
        rules += ["wrong_type", "invalid"]
    elif f.kind == "decimal":
        rules += ["not_number", "not_exact", "out_of_range", "too_precise"]
    elif f.kind == "double":
        rules += ["not_number", "not_finite"]
    elif f.kind == "integer":
        rules += ["not_integer"]
    elif f.kind == "boolean":
        rules += ["not_boolean"]
    rules += [r for r, on in (("below_min", f.min), ("above_max", f.max)) if on is not None]
    return rules + (["not_allowed"] if f.allowed is not None else [])


def _literal_non_finite(f: FieldSpec) -> bool:
    """Whether a bare NaN/Infinity literal under this field's key gets a reason of its own."""
    return f.kind in {"decimal", "double"} and f.on_invalid == "quarantine"


def reasons(spec: PipelineSpec | None = None) -> dict[str, str]:
    """Every quarantine reason of a pipeline, in the order the rules are checked (the first broken rule is
    reported): the line's, then each field's."""
    spec = spec or first_spec()
    found = dict(LINE_REASONS)
    for name, f in spec.fields.items():
        if _literal_non_finite(f):
            found[f"{name}_not_finite"] = f"{name} is NaN, Infinity or -Infinity, written as a bare literal (not JSON)"
    found.update(_DOCUMENT_REASONS)
    for name, f in spec.fields.items():
        formats = [_TIME_FORMATS[t] for t in spec.time.formats]
        takes = {"string" if t == "iso8601" else "an integer" for t in spec.time.formats}
        wrong = (
            "neither a string nor an integer"
            if len(takes) > 1
            else f"not {'a string' if 'string' in takes else 'an integer'}"
        )
        precision, scale = f.decimal_places if f.kind == "decimal" else (0, 0)
        facts = {
            "f": name, "max_length": f.max_length, "pattern": f.pattern, "type": f.type, "min": f.min, "max": f.max,
            "allowed": ", ".join(map(str, f.allowed or ())), "time_formats": " or ".join(formats),
            "wrong_type": wrong, "whole": precision - scale, "scale": scale,
        }  # fmt: skip
        for rule in field_rules(name, f, spec):
            if rule == "not_finite" and f"{name}_not_finite" in found:
                continue
            found[f"{name}_{rule}"] = _FIELD_RULES[rule].format(**facts)
    return found


# ISO-8601 date-time: date, 'T' (or a space), hours and minutes, optional seconds and fraction, optional
# zone (Z or +hh[:mm]); a missing zone means UTC because the session time zone is UTC.
# (Java's "$" would also match before a final line break, so every pattern ends with "\z".) Year 0000 as
# written is outside the contract's years even when an offset brings its instant into year 1.
_ISO_DATE_TIME = r"^(?!0000)\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?\z"
_NUMBER_PARTS = r"^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?\z"
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MIN_EPOCH_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
_MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_MAX_EPOCH_MICROS = _MAX_EPOCH_MS * 1000 + 999
# A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF one, or the latter not after the former, once
# every escaped backslash is out of the way (so "\\\\uD800" is text, not an escape).
_HIGH = r"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_SURROGATE = f"{_HIGH}(?!{_LOW})|(?<!{_HIGH}){_LOW}"


def line_text(line_bytes: Column) -> tuple[Column, Column]:
    """(``raw``, ``raw_bytes``) of a received line's bytes: the text, and the bytes themselves only when
    they are not UTF-8 (``raw`` then shows each invalid sequence as U+FFFD). Nothing is replaced silently."""
    text = line_bytes.cast("string")
    valid = F.is_valid_utf8(text)
    return F.when(valid, text).otherwise(F.make_valid_utf8(text)), F.when(~valid, line_bytes)


def _is_blank(text: Column) -> Column:
    """Empty or only JSON white space (Java's ``\\s`` would also take vertical tab and form feed)."""
    return text.rlike(r"^[ \t\n\r]*\z")


def _single_value(text: Column) -> Column:
    """Whether nothing but white space follows the JSON value that begins ``text``.

    Spark's parser stops after the first value and ignores what follows. Wrapped in ``[…]`` a line with
    more after its value is invalid or has more than one element, except when it continues with ``]``;
    wrapped as ``{"v": …}`` that case is invalid (and so is any continuation except ``}``). One more
    level of nesting is what the two checks cost: values nested 1000 deep fail them.
    """
    in_array = F.json_array_length(F.concat(F.lit("["), text, F.lit("\n]")))
    in_object = F.json_object_keys(F.concat(F.lit('{"v":'), text, F.lit("\n}")))
    return (in_array == 1) & in_object.isNotNull()


def _iso_text(text: Column) -> Column:
    """ISO-8601 text in the one shape Spark's cast reads: upper-case T and Z, seconds always present."""
    upper = F.upper(text)
    return F.regexp_replace(upper, r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(?=$|[Z+-])", "$1T$2:00")


def _bare_non_finite(name: str) -> str:
    return f'"{name}"' + r"\s*:\s*[-+]?(NaN|Infinity)"


def _number_in_line(name: str) -> str:
    """The key ``name`` however it is spelt (any letter may be a \\u00XX escape), then its number's text."""
    key = '"' + "".join(f"(?:{c}|\\\\u00(?i:{ord(c):02x}))" for c in name) + '"'
    return key + r"\s*:\s*(-?[0-9][0-9.eE+-]*)"


def _exact_decimal(number_text: Column, precision: int, scale: int) -> tuple[Column, Column, Column]:
    """(fits ``precision - scale`` integer digits, at most ``scale`` significant fractional digits, exact
    decimal(precision, scale) value).

    Works on the number's own decimal text (mantissa and exponent), so no digit is ever rounded away.
    """
    sign = F.regexp_extract(number_text, _NUMBER_PARTS, 1)
    whole = F.regexp_extract(number_text, _NUMBER_PARTS, 2)
    fraction = F.regexp_extract(number_text, _NUMBER_PARTS, 3)
    exponent_text = F.regexp_extract(number_text, _NUMBER_PARTS, 4)
    # An exponent beyond 10^8 only matters by its sign: the value is zero, or too small or too large (and
    # the scale arithmetic below stays inside an int).
    exponent_value = exponent_text.try_cast("long")
    exponent = (
        F.when(exponent_text == "", F.lit(0))
        .when(F.abs(exponent_value) <= 100_000_000, exponent_value.cast("int"))
        .when(exponent_text.startswith("-"), F.lit(-1_000_000_000))
        .otherwise(F.lit(1_000_000_000))
    )
    digits = F.regexp_replace(F.concat(whole, fraction), "^0+", "")
    significant = F.regexp_replace(digits, r"0+\z", "")
    # value = significant * 10^-exponent_of_value
    exponent_of_value = F.length(fraction) - exponent - (F.length(digits) - F.length(significant))
    is_zero = significant == ""
    precise_enough = is_zero | (exponent_of_value <= scale)
    fits = is_zero | (F.length(significant) - exponent_of_value <= precision - scale)
    decimal = DecimalType(precision, scale)
    value = F.when(is_zero, F.lit(0).cast(decimal)).otherwise(
        F.concat(sign, significant, F.lit("e"), (-exponent_of_value).cast("string")).try_cast(decimal)
    )
    well_formed = number_text.rlike(_NUMBER_PARTS)
    return well_formed & fits, well_formed & precise_enough, value


def _decimal_reading(precision: int, scale: int):
    def reading(number_text: Column) -> Column:
        fits, precise, value = _exact_decimal(number_text, precision, scale)
        return F.struct(fits.alias("fits"), precise.alias("precise"), value.alias("value"))

    return reading


def _c(name: str, what: str) -> Column:
    return F.col(f"__{name}__{what}")


def _n(name: str, what: str) -> str:
    return f"__{name}__{what}"


def parse_events(
    lines: DataFrame, max_line_bytes: int, raw: str = "raw", spec: PipelineSpec | None = None
) -> DataFrame:
    """Add ``reason`` (null when the line is a valid event) and one typed column per declared field of
    ``spec`` (the first pipeline's by default) to ``lines``.

    Time semantics: the event-time field is the instant the event happened, taken only from the line (ISO-8601
    with Z or an offset, no offset meaning UTC, or integer epoch seconds or milliseconds, as the spec says);
    processing time plays no part here.
    """
    spec = spec or first_spec()
    steps, result = _parse_steps(lines.sparkSession, spec, max_line_bytes, raw, "raw_bytes" in lines.columns)
    staged = lines
    for step in steps:
        staged = staged.select("*", *step)
    return staged.select(*lines.columns, *result)


#: The parse's column expressions by (spec, line limit, raw column, has raw bytes), for the JVM they were
#: built in: building them is a few thousand calls into the JVM (about a second a batch under load), and
#: unresolved columns do not depend on the frame they are applied to.
_STEPS: dict[tuple[str, int, str, bool], tuple[object, list[list[Column]], list[Column]]] = {}


def _parse_steps(
    spark: SparkSession, spec: PipelineSpec, max_line_bytes: int, raw: str, has_raw_bytes: bool
) -> tuple[list[list[Column]], list[Column]]:
    """Each step's new columns, and the columns the parse adds to the line's own (see :func:`_build_steps`)."""
    key = (spec.model_dump_json(), max_line_bytes, raw, has_raw_bytes)
    jvm = spark._jvm  # the cached columns are objects of this JVM
    kept = _STEPS.get(key)
    if kept is None or kept[0] is not jvm:
        kept = (jvm, *_build_steps(spec, max_line_bytes, raw, has_raw_bytes))
        _STEPS[key] = kept
    return kept[1], kept[2]


def _build_steps(
    spec: PipelineSpec, max_line_bytes: int, raw: str, has_raw_bytes: bool
) -> tuple[list[list[Column]], list[Column]]:
    declared = spec.fields
    # Each step's results become columns before the next step uses them: inside one CASE WHEN, Spark would
    # otherwise re-parse the line for every rule it checks.
    text = F.col(raw)
    not_utf8 = F.col("raw_bytes").isNotNull() if has_raw_bytes else F.lit(False)
    too_long = F.octet_length(text) > max_line_bytes
    steps = [_named(_not_utf8=not_utf8, _too_long=too_long)]
    steps.append(_named(_parsed=F.when(~F.col("_not_utf8") & ~F.col("_too_long"), F.try_parse_json(text))))
    unescaped = F.regexp_replace(text, r"\\\\", "__")
    # Only a line with a \u escape can hold a lone surrogate: the others skip both regular expressions.
    lone_surrogate = text.contains("\\u") & unescaped.rlike(_LONE_SURROGATE)
    one_value = F.col("_parsed").isNotNull() & _single_value(text) & ~lone_surrogate
    steps.append(_named(_doc=F.when(one_value, F.col("_parsed"))))
    document = F.col("_doc")
    steps.append(_named(**{_n(n, "v"): F.try_variant_get(document, f"$.{n}", "variant") for n in declared}))
    steps.append(
        _named(
            **{_n(n, "type"): F.schema_of_variant(_c(n, "v")) for n in declared},
            **{_n(n, "missing"): _c(n, "v").isNull() | F.is_variant_null(_c(n, "v")) for n in declared},
        )
    )
    steps.append(_named(**{_n(n, "read"): _read(n, f, spec, text) for n, f in declared.items()}))
    steps.append(
        _named(**{_n(n, "checked"): _checked(n, f) for n, f in declared.items() if f.kind in {"timestamp", "decimal"}})
    )
    steps.append(_named(**{_n(n, "value"): _value(n, f) for n, f in declared.items()}))
    steps.append(_named(reason=_reason(spec, text, document)))

    valid = F.col("reason").isNull()
    result = [
        F.col("reason"),
        *(F.when(valid, _kept(n, f, spec)).alias(n) for n, f in declared.items()),
        # Canonical JSON (keys sorted, numbers normalised) so a re-serialised redelivery is not a conflict.
        F.when(document.isNotNull(), F.sha2(F.to_json(document), 256)).alias("payload_hash"),
    ]
    return steps, result


def _read(name: str, f: FieldSpec, spec: PipelineSpec, text: Column) -> Column:
    """First reading of a field's variant by its kind (null when its JSON type does not fit)."""
    v, kind = _c(name, "v"), _c(name, "type")
    if f.kind == "string":
        return F.when(kind == "STRING", F.variant_get(v, "$", "string"))
    if f.kind == "timestamp":
        formats = spec.time.formats
        integer = F.try_variant_get(v, "$", "bigint")
        reading = F.when(F.lit(False), F.lit(None).cast("timestamp"))
        if "iso8601" in formats:
            as_text = F.variant_get(v, "$", "string")
            reading = reading.when(
                (kind == "STRING") & as_text.rlike(_ISO_DATE_TIME), _iso_text(as_text).try_cast("timestamp")
            )
        if "epoch_millis" in formats:
            reading = reading.when(
                kind.isin(*_INTEGER_TYPES) & integer.between(_MIN_EPOCH_MS, _MAX_EPOCH_MS), F.timestamp_millis(integer)
            )
        if "epoch_seconds" in formats:
            reading = reading.when(
                kind.isin(*_INTEGER_TYPES) & integer.between(_MIN_EPOCH_MS // 1000, _MAX_EPOCH_MS // 1000),
                F.timestamp_seconds(integer),
            )
        return reading
    if f.kind == "decimal":
        # Integers and plain decimals keep their exact digits in the variant. Exponent notation (or more than 38
        # digits) becomes a DOUBLE there, so its digits are taken from the line's own text instead: of every
        # number the line gives the field's key (nested objects may have one too), those equal to the variant's
        # double; when they disagree on the exact value, the value is ambiguous.
        candidates = F.filter(
            F.regexp_extract_all(text, F.lit(_number_in_line(name)), 1),
            lambda number: number.try_cast("double") == F.variant_get(v, "$", "double"),
        )
        return F.when(kind == "DOUBLE", F.array_distinct(F.transform(candidates, _decimal_reading(*f.decimal_places))))
    if f.kind == "double":
        return F.when(_is_number(kind), F.try_variant_get(v, "$", "double"))
    if f.kind == "integer":
        return F.when(kind.isin(*_INTEGER_TYPES), F.try_variant_get(v, "$", "bigint"))
    return F.when(kind == "BOOLEAN", F.try_variant_get(v, "$", "boolean"))


def _is_number(kind: Column) -> Column:
    return kind.isin(*_INTEGER_TYPES, "DOUBLE") | kind.startswith("DECIMAL")


def _checked(name: str, f: FieldSpec) -> Column:
    """Second step of a timestamp (inside the years 1-9999 in UTC) or a decimal (fits, precise)."""
    reading = _c(name, "read")
    if f.kind == "timestamp":
        # An offset can move a local time in year 1 or 9999 out of the years 1-9999 in UTC.
        return F.when(F.unix_micros(reading).between(_MIN_EPOCH_MS * 1000, _MAX_EPOCH_MICROS), reading)
    precision, scale = f.decimal_places
    kind, v = _c(name, "type"), _c(name, "v")
    is_double = kind == "DOUBLE"
    # A variant DECIMAL(p,s) is exact with trailing zeros dropped, so its type alone says whether it fits
    # decimal(p,s); integers fit below 10^(p-s). Only DOUBLEs need the digit-by-digit reading of their text.
    decimal_precision = F.regexp_extract(kind, r"^DECIMAL\((\d+),(\d+)\)$", 1).try_cast("int")
    decimal_scale = F.regexp_extract(kind, r"^DECIMAL\((\d+),(\d+)\)$", 2).try_cast("int")
    fits = (
        F.when(is_double, reading[0]["fits"])
        .when(kind.isin(*_INTEGER_TYPES), F.abs(F.variant_get(v, "$", "decimal(38,0)")) < 10 ** (precision - scale))
        .otherwise(decimal_precision - decimal_scale <= precision - scale)
    )
    precise = F.when(is_double, reading[0]["precise"]).otherwise(F.coalesce(decimal_scale, F.lit(0)) <= scale)
    return F.struct(fits.alias("fits"), precise.alias("precise"))


def _value(name: str, f: FieldSpec) -> Column:
    """The field's typed value when its JSON type fits (range and value rules are checked apart)."""
    if f.kind == "timestamp":
        return _c(name, "checked")
    if f.kind != "decimal":
        return _c(name, "read")
    checked, kind = _c(name, "checked"), _c(name, "type")
    decimal = f"decimal({f.decimal_places[0]},{f.decimal_places[1]})"
    return F.when(
        checked["fits"] & checked["precise"],
        F.when(kind == "DOUBLE", _c(name, "read")[0]["value"]).otherwise(
            F.try_variant_get(_c(name, "v"), "$", decimal)
        ),
    )


def _breaks(name: str, f: FieldSpec, rule: str) -> Column:
    """Whether a present value breaks ``rule`` (the rule's check, for :func:`_reason` and :func:`_kept`)."""
    kind, value, missing = _c(name, "type"), _c(name, "value"), _c(name, "missing")
    bound = (lambda x: F.lit(Decimal(str(x))).cast(f.type)) if f.kind == "decimal" else F.lit
    # Only the asked rule's column is built: each is several calls into the JVM.
    checks: dict[str, Callable[[], Column]] = {
        "missing": lambda: missing,
        "not_string": lambda: kind != "STRING",
        "empty": lambda: _is_blank(value),
        "too_long": lambda: F.char_length(value) > F.lit(f.max_length or 0),
        "no_match": lambda: ~value.rlike(f"^(?:{f.pattern})\\z") if f.pattern else F.lit(False),
        "not_allowed": lambda: ~value.isin(*(f.allowed or ())) if f.allowed else F.lit(False),
        "wrong_type": lambda: (kind != "STRING") & ~kind.isin(*_INTEGER_TYPES),
        "invalid": lambda: value.isNull(),
        "not_number": lambda: ~_is_number(kind),
        "not_finite": lambda: (
            F.isnan(value) | (F.abs(value) == F.lit(float("inf"))) if f.kind == "double" else F.lit(False)
        ),
        "not_exact": lambda: (kind == "DOUBLE") & (F.size(_c(name, "read")) != 1),
        "out_of_range": lambda: ~_c(name, "checked")["fits"] if f.kind == "decimal" else F.lit(False),
        "too_precise": lambda: ~_c(name, "checked")["precise"] if f.kind == "decimal" else F.lit(False),
        "not_integer": lambda: value.isNull(),
        "not_boolean": lambda: value.isNull(),
        "below_min": lambda: value < bound(f.min) if f.min is not None else F.lit(False),
        "above_max": lambda: value > bound(f.max) if f.max is not None else F.lit(False),
    }
    return checks[rule]()


def _wrong_time_type(kind: Column, formats: list[str]) -> Column:
    takes = F.lit(False)
    if "iso8601" in formats:
        takes = takes | (kind == "STRING")
    if {"epoch_millis", "epoch_seconds"} & set(formats):
        takes = takes | kind.isin(*_INTEGER_TYPES)
    return ~takes


def _reason(spec: PipelineSpec, text: Column, document: Column) -> Column:
    """The first rule the line breaks (null: a valid event), in the order of :func:`reasons`."""
    reason = (
        F.when(F.col("_not_utf8"), "not_utf8")
        .when(F.col("_too_long"), "line_too_long")
        .when(text.isNull() | _is_blank(text), "empty_line")
    )
    for name, f in spec.fields.items():
        if _literal_non_finite(f):
            reason = reason.when(document.isNull() & text.rlike(_bare_non_finite(name)), f"{name}_not_finite")
    reason = reason.when(document.isNull(), "not_json")
    reason = reason.when(~text.rlike(r"^[ \t\n\r]*\{"), "not_object")  # one JSON value: an object iff it opens with {
    for name, f in spec.fields.items():
        missing = _c(name, "missing")
        for rule in field_rules(name, f, spec):
            broken = _breaks(name, f, rule)
            if rule == "wrong_type":
                broken = _wrong_time_type(_c(name, "type"), spec.time.formats)
            reason = reason.when(broken if rule == "missing" else ~missing & broken, f"{name}_{rule}")
    return reason


def _kept(name: str, f: FieldSpec, spec: PipelineSpec) -> Column:
    """A valid line's value of the field: null when absent, or (``on_invalid: null``) when it breaks a rule."""
    value = _c(name, "value")
    if f.on_invalid == "quarantine":
        return value
    ok = ~_c(name, "missing") & value.isNotNull()
    for rule in field_rules(name, f, spec, lenient=True):
        if rule not in {"missing", "wrong_type"}:
            ok = ok & ~F.coalesce(_breaks(name, f, rule), F.lit(False))
    return F.when(ok, value)


def _named(**columns: Column) -> list[Column]:
    return [column.alias(name) for name, column in columns.items()]
