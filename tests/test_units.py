import pytest
from hypothesis import given, strategies as st

from emu.errors import ConfigError
from emu.units import (
    format_rate,
    format_size,
    format_time,
    parse_budget,
    parse_byte_rate,
    parse_ops,
    parse_rate,
    parse_size,
    parse_time,
    resolve_budget,
)


@pytest.mark.parametrize("text,value", [
    ("4GiB", 4 * 2**30), ("256KB", 256_000), ("256kB", 256_000), ("16MiB", 16 * 2**20), ("1.5e6", 1_500_000),
    ("512", 512), (512, 512), ("1500 B", 1500), ("2 bytes", 2), ("0.5KB", 500),
])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text,value", [
    ("1Gbps", 10**9), ("10Gb/s", 10 * 10**9), ("125MB/s", 10**9), ("100Mbps", 10**8), ("1e9", 10**9), ("1 Gbit/s", 10**9),
])
def test_rates_are_bits_per_second(text, value):
    assert parse_rate(text) == value


@pytest.mark.parametrize("text,value", [
    ("10gbps", 10**10), ("10GBIT/S", 10**10), ("10gb/s", 10**10), ("100mbps", 10**8), ("1kbps", 1000),
    ("10GB/s", 8 * 10**10), ("10gB/s", 8 * 10**10), ("10GBps", 8 * 10**10), ("10gbytes/s", 8 * 10**10),
    ("1gibps", 2**30),
])
def test_rates_read_the_prefix_and_per_second_in_any_case_and_b_as_written(text, value):
    assert parse_rate(text) == value


@pytest.mark.parametrize("text", ["10GBPS", "10GBpS", "1000BPS"])
def test_rates_in_capitals_that_could_be_bits_or_bytes_are_refused(text):
    with pytest.raises(ConfigError, match="ambiguous; write bps or b/s for bits/s, B/s for bytes/s"):
        parse_rate(text)


def test_memory_bandwidth_is_bytes_per_second_and_exact():
    assert parse_byte_rate("19.2GB/s") == 19_200_000_000  # Decimal arithmetic: not 19199999999
    assert parse_byte_rate("8Gbps") == 10**9
    assert parse_ops("327.68GOPS") == 327_680_000_000
    assert parse_ops("1.2TFLOPS") == 1_200_000_000_000


@pytest.mark.parametrize("text,ps", [("1us", 10**6), ("0.5s", 5 * 10**11), ("250ns", 250_000), ("1.5ms", 1_500_000_000),
                                     ("7", 7), ("3ps", 3), ("2µs", 2 * 10**6)])
def test_times_are_integer_picoseconds(text, ps):
    assert parse_time(text) == ps
    assert isinstance(parse_time(text), int)


@pytest.mark.parametrize("parser,bad", [
    (parse_size, "4GB/s"), (parse_size, "1.5B"), (parse_size, "-1KB"), (parse_size, "lots"), (parse_size, True),
    (parse_rate, "1Gbpx"), (parse_time, "3 weeks"), (parse_time, "1e400"), (parse_ops, "fast"),
])
def test_bad_values_raise_config_error_naming_the_value(parser, bad):
    with pytest.raises(ConfigError) as exc:
        parser(bad, "hw.thing")
    assert "hw.thing" in str(exc.value) and "\n" not in str(exc.value)


def test_budget_is_bytes_or_a_multiple():
    assert parse_budget("2x") == "2x"
    assert parse_budget("2.50X") == "2.5x"
    assert parse_budget("16MiB") == 16 * 2**20
    assert resolve_budget("2x", 7_340_032) == 14_680_064
    assert resolve_budget("1.5x", 1000) == 1500
    assert resolve_budget(12345, 1000) == 12345
    for bad in ("0x", "-1x", "0"):
        with pytest.raises(ConfigError):
            parse_budget(bad)


def test_formatting():
    assert format_size(16 * 2**20) == "16MiB"
    assert format_size(256_000) == "250KiB"  # binary for sizes and memory, whatever the value
    assert format_size(277_875) == "271.4KiB" and format_size(11_955_077_120) == "11.13GiB"
    assert format_size(1500) == "1500B"
    assert format_rate(10**9) == "1Gbps"
    assert format_time(1_500_000) == "1.5us"
    assert format_time(0) == "0ps"


@given(st.integers(min_value=0, max_value=2**50))
def test_formatted_sizes_parse_back_within_rounding(n):
    assert abs(parse_size(format_size(n)) - n) <= n * 5e-4


@given(st.integers(min_value=1, max_value=9999), st.integers(min_value=0, max_value=4))
def test_round_sizes_format_exactly(k, e):
    n = k * 1024**e
    assert parse_size(format_size(n)) == n


@given(st.integers(min_value=0, max_value=10**15))
def test_formatted_times_parse_back_within_rounding(ps):
    assert abs(parse_time(format_time(ps)) - ps) <= ps * 5e-4


@pytest.mark.parametrize("rate", ["10Gbps", "125MB/s", "1e9", "2.5 Gbit/s", "400Mb/s"])
def test_dashboard_whatif_takes_every_rate_the_replay_reads(rate):
    from pathlib import Path

    from dashboard.whatif import build_args

    args, _ = build_args(Path("t.json"), {"rate": rate, "latency": "0.5 us"})
    assert f"--set=hw.link_rate={rate.replace(' ', '')}" in args and "--set=hw.link_latency_ps=0.5us" in args
    assert parse_rate(rate) > 0


@pytest.mark.parametrize("form", [{"rate": "0"}, {"rate": "fast"}, {"rate": "-1Gbps"}, {"latency": "1 parsec"}])
def test_dashboard_whatif_refuses_what_the_replay_refuses(form):
    from pathlib import Path

    from dashboard.whatif import WhatIfError, build_args

    with pytest.raises(WhatIfError):
        build_args(Path("t.json"), form)


def test_topology_files_read_numbers_with_the_unit_parser(tmp_path):
    import json

    from emu.topology.io import load

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"nodes": [0, 1], "links": [{"u": 0, "v": 1, "latency_us": "0.1", "rate_gbps": "2.5"}]}))
    G = load(str(path))
    assert G.edges[0, 1]["latency_ps"] == 100_000 and G.edges[0, 1]["rate_bps"] == 2_500_000_000
