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
    "empty_line": "the line is empty or only white space",
    "amount_not_finite": "amount is NaN, Infinity or -Infinity (also when written as a bare literal)",
    "not_json": "the line is not valid JSON (an object with a repeated key counts as invalid)",
    "not_object": "the JSON value is not an object",
    "event_id_missing": "event_id is absent or null",
    "event_id_not_string": "event_id is not a JSON string",
    "event_id_empty": "event_id is an empty or blank string",
    "user_id_missing": "user_id is absent or null",
    "user_id_not_string": "user_id is not a JSON string",
    "user_id_empty": "user_id is an empty or blank string",
    "event_time_missing": "event_time is absent or null",
    "event_time_wrong_type": "event_time is neither a string nor an integer",
    "event_time_invalid": "event_time is not an ISO-8601 date-time or epoch milliseconds in years 1-9999",
    "amount_missing": "amount is absent or null",
    "amount_not_number": "amount is not a JSON number (a string, boolean, object or array)",
    "amount_not_exact": "amount is in exponent notation or has over 38 digits, and its text is ambiguous in the line",
    "amount_out_of_range": "amount has more than 16 integer digits, so it does not fit decimal(18,2)",
    "amount_too_precise": "amount has more than 2 fractional digits, so it is not exact in decimal(18,2)",
    "event_type_not_string": "event_type is present but not a JSON string",
}

#: Optional string fields carried into silver for the tables that read them (clicks' ``url`` for
#: gold.unique_urls; orders' and payments' ``order_id`` for gold.order_payments). The contract's "anything
#: else is ignored downstream" holds for every other field.
OPTIONAL_ATTRIBUTES = ("url", "order_id")

# ISO-8601 date-time: date, 'T' (or a space), hours and minutes, optional seconds and fraction, optional
# zone (Z or +hh[:mm]); a missing zone means UTC because the session time zone is UTC.
_ISO_DATE_TIME = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?$"
_BARE_NON_FINITE = r'"amount"\s*:\s*[-+]?(NaN|Infinity)'
_AMOUNT_IN_LINE = r'"amount"\s*:\s*(-?[0-9][0-9.eE+-]*)'
_NUMBER_PARTS = r"^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$"
_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MIN_EPOCH_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
_MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def _is_blank(text: Column) -> Column:
    return text.rlike(r"^\s*$")


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
    exponent = F.coalesce(F.regexp_extract(number_text, _NUMBER_PARTS, 4).try_cast("int"), F.lit(0))
    digits = F.regexp_replace(F.concat(whole, fraction), "^0+", "")
    significant = F.regexp_replace(digits, "0+$", "")
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


def parse_events(lines: DataFrame, raw: str = "raw") -> DataFrame:
    """Add ``reason`` (null when the line is a valid event) and the typed event columns to ``lines``.

    Time semantics: ``event_time`` is the instant the event happened, taken only from the line
    (ISO-8601 with Z or an offset, no offset meaning UTC, or integer epoch milliseconds); processing
    time plays no part here.
    """
    # Each step's results become columns before the next step uses them: inside one CASE WHEN, Spark would
    # otherwise re-parse the line for every rule it checks.
    text = F.col(raw)
    staged = _add(lines, _doc=F.try_parse_json(text))
    document = F.col("_doc")
    fields = ("event_id", "user_id", "event_time", "amount", "event_type")
    staged = _add(
        staged,
        _doc_type=F.schema_of_variant(document),
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
    # digits) becomes a DOUBLE there, so its digits are taken from the line's own text instead, when the line
    # names "amount" exactly once (else a nested "amount" could be mistaken for it).
    amount_mentions = F.size(F.split(text, r'"amount"\s*:')) - 1
    staged = _add(
        staged,
        _event_id_text=F.variant_get(event_id, "$", "string"),
        _user_id_text=F.variant_get(user_id, "$", "string"),
        _parsed_time=F.when(
            (event_time_type == "STRING") & time_text.rlike(_ISO_DATE_TIME),
            _iso_text(time_text).try_cast("timestamp"),
        ).when(
            event_time_type.isin(*_INTEGER_TYPES) & time_millis.between(_MIN_EPOCH_MS, _MAX_EPOCH_MS),
            F.timestamp_millis(time_millis),
        ),
        _amount_double=F.when(amount_is_double, F.variant_get(amount, "$", "double")),
        _amount_text=F.when(
            amount_is_double,
            F.when(amount_mentions == 1, F.regexp_extract(text, _AMOUNT_IN_LINE, 1)),
        ).otherwise(F.to_json(amount)),
    )
    event_id_text, user_id_text, parsed_time = F.col("_event_id_text"), F.col("_user_id_text"), F.col("_parsed_time")
    amount_double, amount_text = F.col("_amount_double"), F.col("_amount_text")
    # A variant DECIMAL(p,s) is exact with trailing zeros dropped, so its type alone says whether it fits
    # decimal(18,2); integers fit below 10^16. Only DOUBLEs need the digit-by-digit reading of their text.
    decimal_precision = F.regexp_extract(amount_type, r"^DECIMAL\((\d+),(\d+)\)$", 1).try_cast("int")
    decimal_scale = F.regexp_extract(amount_type, r"^DECIMAL\((\d+),(\d+)\)$", 2).try_cast("int")
    text_fits, text_precise, text_value = _money(amount_text)
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
        F.when(text.isNull() | _is_blank(text), "empty_line")
        .when(document.isNull() & text.rlike(_BARE_NON_FINITE), "amount_not_finite")
        .when(document.isNull(), "not_json")
        .when(~F.col("_doc_type").startswith("OBJECT"), "not_object")
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
        .when(amount_is_double & (F.isnan(amount_double) | (F.abs(amount_double) == float("inf"))), "amount_not_finite")
        .when(amount_text.isNull() | (amount_text == ""), "amount_not_exact")
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
