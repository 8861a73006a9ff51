import pytest

from astra_compile.network.errors import UserError
from astra_compile.network.units import (
    GIB,
    format_size,
    gbps_to_bytes_per_ns,
    parse_number_list,
    parse_size,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4096", 4096),
        ("1B", 1),
        ("1KB", 1024),
        ("1kb", 1024),
        ("1KiB", 1024),
        ("64MB", 64 * 2**20),
        ("64 mib", 64 * 2**20),
        ("1GB", 2**30),
        ("2GiB", 2 * 2**30),
        ("1TB", 2**40),
        ("1.5KB", 1536),
        ("0.5MB", 2**19),
        (".25KB", 256),
        ("  8MB ", 8 * 2**20),
        ("3.0B", 3),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty size"),
        ("   ", "empty size"),
        ("-1KB", "positive"),
        ("0", "size must be positive"),
        ("0KB", "size must be positive"),
        ("1XB", "unknown size unit 'XB'"),
        ("0.3B", "not a whole number of bytes"),
        ("1.0000001KB", "not a whole number of bytes"),
        ("abc", "malformed size 'abc'"),
        ("1e3", "malformed size"),
        ("1,5KB", "malformed size"),
    ],
)
def test_parse_size_errors(text, fragment):
    with pytest.raises(UserError) as info:
        parse_size(text)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_gbps_conversion_uses_power_of_two_gigabytes():
    assert GIB == 2**30
    assert gbps_to_bytes_per_ns(1) == pytest.approx(1.073741824)
    assert gbps_to_bytes_per_ns(50) == pytest.approx(50 * 2**30 / 1e9)


@pytest.mark.parametrize(
    "nbytes, expected",
    [
        (0, "0B"),
        (1, "1B"),
        (1023, "1023B"),
        (1024, "1KB"),
        (1536, "1.5KB"),
        (2**20, "1MB"),
        (3 * 2**19, "1.5MB"),
        (1073741824, "1GB"),
        (5 * 2**40, "5TB"),
        (2**50, "1024TB"),
        (2**20 - 1, "1MB"),  # rounds up to the next unit rather than "1024KB"
        (1000, "1000B"),
    ],
)
def test_format_size(nbytes, expected):
    assert format_size(nbytes) == expected


@pytest.mark.parametrize("nbytes", [1, 1024, 1536, 3 * 2**19, 2**30, 7 * 2**40])
def test_format_size_round_trips_for_exact_values(nbytes):
    assert parse_size(format_size(nbytes)) == nbytes


def test_parse_number_list_basic():
    assert parse_number_list("50,50,50", "bandwidth") == [50.0, 50.0, 50.0]
    assert parse_number_list(" 12.5 , 25 ", "bandwidth", count=2) == [12.5, 25.0]
    assert parse_number_list([1, 2], "latency", count=2) == [1.0, 2.0]
    assert parse_number_list(7, "links") == [7.0]


def test_parse_number_list_broadcasts_single_value():
    assert parse_number_list("100", "bandwidth", count=3) == [100.0, 100.0, 100.0]
    assert parse_number_list([5], "latency", count=2) == [5.0, 5.0]


def test_parse_number_list_allows_zero_and_negative_when_not_positive():
    assert parse_number_list("0,-1", "latency", positive=False) == [0.0, -1.0]


@pytest.mark.parametrize(
    "args, fragments",
    [
        (("", "bandwidth"), ["bandwidth", "empty"]),
        (("50,,50", "bandwidth"), ["bandwidth", "50,,50"]),
        (("50,abc", "bandwidth"), ["bandwidth", "'abc' is not a number"]),
        (("50,0", "bandwidth"), ["bandwidth must be positive", "0"]),
        (("-5", "bandwidth"), ["bandwidth must be positive", "-5"]),
        (("nan", "bandwidth"), ["finite"]),
        (("inf", "latency", None, False), ["finite"]),
        (("50,50", "bandwidth", 3), ["bandwidth", "got 2 values", "expected 3"]),
        (("1,2,3,4", "latency", 3, False), ["latency", "got 4 values", "expected 3"]),
        (([], "links"), ["links", "empty"]),
        (([True], "links"), ["links"]),
    ],
)
def test_parse_number_list_errors(args, fragments):
    with pytest.raises(UserError) as info:
        parse_number_list(*args)
    for fragment in fragments:
        assert fragment in str(info.value)
