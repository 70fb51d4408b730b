"""The contract's event rules as Spark column expressions: parse, type and validate one raw line.

Each line is parsed once into a VARIANT (Spark's JSON parser); the JSON type of every field is read from
the variant, so a number is never confused with a string that looks like one. Money never passes
through a float: its decimal text is cast to decimal(18,2), and only amounts whose exact value fits
(at most 16 integer and 2 fractional digits) are accepted.
"""

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from warehouse.catalog import MONEY

#: Every quarantine reason, in the order the rules are checked (the first broken rule is reported).
REASONS: dict[str, str] = {
    "not_utf8": "the line's bytes are not UTF-8 (bronze keeps them in raw_bytes)",
    "line_too_long": "the line is longer than LAKEHOUSE_MAX_LINE_BYTES; it is kept but never parsed",
    "empty_line": "the line is empty or only JSON white space (space, tab, CR, LF)",
    "amount_not_finite": "amount is NaN, Infinity or -Infinity, written as a bare literal (not JSON)",
    "not_json": (
        "the line is not one JSON value: invalid JSON, content after the value, a repeated key, a string with"
        " an unpaired surrogate escape, or arrays and objects nested over 999 deep"
    ),
    "not_object": "the JSON value is not an object",
    "event_id_missing": "event_id is absent or null",
    "event_id_not_string": "event_id is not a JSON string",
    "event_id_empty": "event_id is an empty or blank string",
    "user_id_missing": "user_id is absent or null",
    "user_id_not_string": "user_id is not a JSON string",
    "user_id_empty": "user_id is an empty or blank string",
    "event_time_missing": "event_time is absent or null",
    "event_time_wrong_type": "event_time is neither a string nor an integer",
    "event_time_invalid": "event_time is not an ISO-8601 date-time or epoch milliseconds, or its UTC instant is "
    "outside the years 1-9999",
    "amount_missing": "amount is absent or null",
    "amount_not_number": "amount is not a JSON number (a string, boolean, object or array)",
    "amount_not_exact": "amount is in exponent notation or has over 38 digits, and the line's text does not tell its "
    "one exact value (its key spelt another way, or nested amounts of the same double)",
    "amount_out_of_range": "amount has more than 16 integer digits (however written), so it does not fit decimal(18,2)",
    "amount_too_precise": "amount has more than 2 fractional digits, so it is not exact in decimal(18,2)",
    "event_type_not_string": "event_type is present but not a JSON string",
}

#: Optional string fields carried into silver for the tables that read them (clicks' ``url`` for
#: gold.unique_urls; orders' and payments' ``order_id`` for gold.order_payments). The contract's "anything
#: else is ignored downstream" holds for every other field.
OPTIONAL_ATTRIBUTES = ("url", "order_id")

# ISO-8601 date-time: date, 'T' (or a space), hours and minutes, optional seconds and fraction, optional
# zone (Z or +hh[:mm]); a missing zone means UTC because the session time zone is UTC.
# (Java's "$" would also match before a final line break, so every pattern ends with "\z".) Year 0000 as
# written is outside the contract's years even when an offset brings its instant into year 1.
_ISO_DATE_TIME = r"^(?!0000)\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?\z"
_BARE_NON_FINITE = r'"amount"\s*:\s*[-+]?(NaN|Infinity)'
# The key "amount" however it is spelt (any letter may be a \\u00XX escape), then its number's text.
_AMOUNT_KEY = '"' + "".join(f"(?:{c}|\\\\u00(?i:{ord(c):02x}))" for c in "amount") + '"'
_AMOUNT_IN_LINE = _AMOUNT_KEY + r"\s*:\s*(-?[0-9][0-9.eE+-]*)"
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


def _money(number_text: Column) -> tuple[Column, Column, Column]:
    """(fits 16 integer digits, at most 2 significant fractional digits, exact decimal(18,2) value).

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
    # value = significant * 10^-scale
    scale = F.length(fraction) - exponent - (F.length(digits) - F.length(significant))
    is_zero = significant == ""
    precise_enough = is_zero | (scale <= 2)
    fits = is_zero | (F.length(significant) - scale <= 16)
    value = F.when(is_zero, F.lit(0).cast(MONEY)).otherwise(
        F.concat(sign, significant, F.lit("e"), (-scale).cast("string")).try_cast(MONEY)
    )
    well_formed = number_text.rlike(_NUMBER_PARTS)
    return well_formed & fits, well_formed & precise_enough, value


def _money_reading(number_text: Column) -> Column:
    fits, precise, value = _money(number_text)
    return F.struct(fits.alias("fits"), precise.alias("precise"), value.alias("value"))


def parse_events(lines: DataFrame, max_line_bytes: int, raw: str = "raw") -> DataFrame:
    """Add ``reason`` (null when the line is a valid event) and the typed event columns to ``lines``.

    Time semantics: ``event_time`` is the instant the event happened, taken only from the line
    (ISO-8601 with Z or an offset, no offset meaning UTC, or integer epoch milliseconds); processing
    time plays no part here.
    """
    # Each step's results become columns before the next step uses them: inside one CASE WHEN, Spark would
    # otherwise re-parse the line for every rule it checks.
    text = F.col(raw)
    not_utf8 = F.col("raw_bytes").isNotNull() if "raw_bytes" in lines.columns else F.lit(False)
    too_long = F.octet_length(text) > max_line_bytes
    staged = _add(lines, _not_utf8=not_utf8, _too_long=too_long)
    staged = _add(staged, _parsed=F.when(~F.col("_not_utf8") & ~F.col("_too_long"), F.try_parse_json(text)))
    unescaped = F.regexp_replace(text, r"\\\\", "__")
    one_value = F.col("_parsed").isNotNull() & _single_value(text) & ~unescaped.rlike(_LONE_SURROGATE)
    staged = _add(staged, _doc=F.when(one_value, F.col("_parsed")))
    document = F.col("_doc")
    fields = ("event_id", "user_id", "event_time", "amount", "event_type")
    staged = _add(
        staged,
        **{f"_{name}": F.try_variant_get(document, f"$.{name}", "variant") for name in fields},
    )
    staged = _add(
        staged,
        **{f"_{name}_type": F.schema_of_variant(F.col(f"_{name}")) for name in fields},
        **{f"_{name}_missing": F.col(f"_{name}").isNull() | F.is_variant_null(F.col(f"_{name}")) for name in fields},
    )
    event_id, user_id, event_time, amount, event_type = (F.col(f"_{name}") for name in fields)
    event_id_type, user_id_type, event_time_type, amount_type, event_type_type = (
        F.col(f"_{name}_type") for name in fields
    )
    event_id_missing, user_id_missing, event_time_missing, amount_missing, event_type_missing = (
        F.col(f"_{name}_missing") for name in fields
    )

    time_text = F.variant_get(event_time, "$", "string")
    time_millis = F.variant_get(event_time, "$", "bigint")
    amount_is_double = amount_type == "DOUBLE"
    # Integers and plain decimals keep their exact digits in the variant. Exponent notation (or more than 38
    # digits) becomes a DOUBLE there, so its digits are taken from the line's own text instead: of every
    # number the line gives a key "amount" (nested objects may have one too), those equal to the variant's
    # double; when they disagree on the exact value, the amount is ambiguous.
    candidates = F.filter(
        F.regexp_extract_all(text, F.lit(_AMOUNT_IN_LINE), 1),
        lambda number: number.try_cast("double") == F.variant_get(amount, "$", "double"),
    )
    staged = _add(
        staged,
        _event_id_text=F.variant_get(event_id, "$", "string"),
        _user_id_text=F.variant_get(user_id, "$", "string"),
        _any_time=F.when(
            (event_time_type == "STRING") & time_text.rlike(_ISO_DATE_TIME),
            _iso_text(time_text).try_cast("timestamp"),
        ).when(
            event_time_type.isin(*_INTEGER_TYPES) & time_millis.between(_MIN_EPOCH_MS, _MAX_EPOCH_MS),
            F.timestamp_millis(time_millis),
        ),
        _amount_readings=F.when(amount_is_double, F.array_distinct(F.transform(candidates, _money_reading))),
    )
    # An offset can move a local time in year 1 or 9999 out of the years 1-9999 in UTC.
    any_time = F.col("_any_time")
    staged = _add(
        staged,
        _parsed_time=F.when(F.unix_micros(any_time).between(_MIN_EPOCH_MS * 1000, _MAX_EPOCH_MICROS), any_time),
    )
    event_id_text, user_id_text, parsed_time = F.col("_event_id_text"), F.col("_user_id_text"), F.col("_parsed_time")
    readings = F.col("_amount_readings")
    text_fits, text_precise, text_value = (readings[0][field] for field in ("fits", "precise", "value"))
    # A variant DECIMAL(p,s) is exact with trailing zeros dropped, so its type alone says whether it fits
    # decimal(18,2); integers fit below 10^16. Only DOUBLEs need the digit-by-digit reading of their text.
    decimal_precision = F.regexp_extract(amount_type, r"^DECIMAL\((\d+),(\d+)\)$", 1).try_cast("int")
    decimal_scale = F.regexp_extract(amount_type, r"^DECIMAL\((\d+),(\d+)\)$", 2).try_cast("int")
    staged = _add(
        staged,
        _amount_fits=F.when(amount_is_double, text_fits)
        .when(amount_type.isin(*_INTEGER_TYPES), F.abs(F.variant_get(amount, "$", "decimal(38,0)")) < 10**16)
        .otherwise(decimal_precision - decimal_scale <= 16),
        _amount_precise=F.when(amount_is_double, text_precise).otherwise(F.coalesce(decimal_scale, F.lit(0)) <= 2),
    )
    staged = _add(
        staged,
        _amount_value=F.when(
            F.col("_amount_fits") & F.col("_amount_precise"),
            F.when(amount_is_double, text_value).otherwise(F.try_variant_get(amount, "$", "decimal(18,2)")),
        ),
    )
    amount_is_number = amount_type.isin(*_INTEGER_TYPES, "DOUBLE") | amount_type.startswith("DECIMAL")

    reason = (
        F.when(F.col("_not_utf8"), "not_utf8")
        .when(F.col("_too_long"), "line_too_long")
        .when(text.isNull() | _is_blank(text), "empty_line")
        .when(document.isNull() & text.rlike(_BARE_NON_FINITE), "amount_not_finite")
        .when(document.isNull(), "not_json")
        .when(~text.rlike(r"^[ \t\n\r]*\{"), "not_object")  # one JSON value: an object iff it opens with {
        .when(event_id_missing, "event_id_missing")
        .when(event_id_type != "STRING", "event_id_not_string")
        .when(_is_blank(event_id_text), "event_id_empty")
        .when(user_id_missing, "user_id_missing")
        .when(user_id_type != "STRING", "user_id_not_string")
        .when(_is_blank(user_id_text), "user_id_empty")
        .when(event_time_missing, "event_time_missing")
        .when((event_time_type != "STRING") & ~event_time_type.isin(*_INTEGER_TYPES), "event_time_wrong_type")
        .when(parsed_time.isNull(), "event_time_invalid")
        .when(amount_missing, "amount_missing")
        .when(~amount_is_number, "amount_not_number")
        .when(amount_is_double & (F.size(readings) != 1), "amount_not_exact")
        .when(~F.col("_amount_fits"), "amount_out_of_range")
        .when(~F.col("_amount_precise"), "amount_too_precise")
        .when(~event_type_missing & (event_type_type != "STRING"), "event_type_not_string")
    )
    staged = _add(staged, reason=reason)

    valid = F.col("reason").isNull()
    attributes = {name: F.try_variant_get(document, f"$.{name}", "variant") for name in OPTIONAL_ATTRIBUTES}
    return staged.select(
        *lines.columns,
        "reason",
        F.when(valid, event_id_text).alias("event_id"),
        F.when(valid, user_id_text).alias("user_id"),
        F.when(valid, parsed_time).alias("event_time"),
        F.when(valid, F.col("_amount_value")).alias("amount"),
        F.when(valid & ~event_type_missing, F.variant_get(event_type, "$", "string")).alias("event_type"),
        # Optional attributes some gold tables read; any other JSON type leaves them null (not invalid).
        *(
            F.when(valid & (F.schema_of_variant(value) == "STRING"), F.variant_get(value, "$", "string")).alias(name)
            for name, value in attributes.items()
        ),
        # Canonical JSON (keys sorted, numbers normalised) so a re-serialised redelivery is not a conflict.
        F.when(document.isNotNull(), F.sha2(F.to_json(document), 256)).alias("payload_hash"),
    )


def _add(frame: DataFrame, **columns: Column) -> DataFrame:
    return frame.select("*", *(column.alias(name) for name, column in columns.items()))
