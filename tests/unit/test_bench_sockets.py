"""The arithmetic of `make bench`'s WebSocket section (bench/sockets.py, bench/sockets_report.py): the latency
summary, what is billed as a message, an idle page's minute and its price beside the long poll's."""

from __future__ import annotations

import pytest

from bench.cost import load_prices
from bench.sockets import (
    CONNECTION_MINUTES,
    KEEPALIVE_MINUTES,
    USAGE,
    added,
    first_at_or_after,
    idle_minute,
    long_poll_minute,
    messages,
    scaled,
    summary,
    usage,
    usd,
)
from bench.sockets_report import _within_noise

NOTHING = dict.fromkeys(USAGE, 0.0)


def test_summary_is_the_median_and_a_measured_p95() -> None:
    got = summary([float(v) for v in range(20, 0, -1)])  # 20..1
    assert got == {"n": 20, "median": 10.5, "p95": 19.0, "min": 1.0, "max": 20.0}


def test_the_first_stamp_at_or_after_a_moment() -> None:
    assert first_at_or_after([1.0, 2.0, 3.0], 2.0) == 2.0
    assert first_at_or_after([1.0, 2.0, 3.0], 2.5) == 3.0
    assert first_at_or_after([1.0], 1.5) is None


@pytest.mark.parametrize(
    ("sizes", "billed"), [([0], 1), ([1, 32 * 1024], 2), ([32 * 1024 + 1], 2), ([128 * 1024], 4), ([], 0)]
)
def test_a_frame_is_billed_per_started_32_kb(sizes: list[int], billed: int) -> None:
    assert messages(sizes) == billed


def test_usage_adds_each_functions_invocations_gb_seconds_and_units() -> None:
    functions = {
        "SocketFunction": {"invocations": 2, "seconds": 0.5, "rru": 1.0, "wru": 3.0},
        "EventsFunction": {"invocations": 1, "seconds": 2.0, "rru": 0.5, "wru": 1.0},
    }
    got = usage(functions, {"SocketFunction": 256, "EventsFunction": 128}, http_requests=1, messages=3)
    assert got == {
        **NOTHING,
        "invocations": 3,
        "gb_seconds": 0.125 + 0.25,
        "rru": 1.5,
        "wru": 4.0,
        "http_requests": 1,
        "messages": 3,
    }


def test_an_idle_minute_is_a_connection_minute_and_shares_of_the_keepalive_and_the_reconnect() -> None:
    keepalive = {**NOTHING, "invocations": 1.0, "messages": 2.0}
    connect = {**NOTHING, "invocations": 4.0, "http_requests": 1.0, "messages": 3.0, "rru": 6.0}
    parts = idle_minute({"idle": NOTHING, "idle_seconds": 30.0, "keepalive": keepalive, "connect": connect})
    total = added(*parts.values())
    assert total["connection_minutes"] == 1.0
    assert total["invocations"] == pytest.approx(1 / KEEPALIVE_MINUTES + 4 / CONNECTION_MINUTES)
    assert total["messages"] == pytest.approx(2 / KEEPALIVE_MINUTES + 3 / CONNECTION_MINUTES)
    assert total["rru"] == pytest.approx(6 / CONNECTION_MINUTES)
    busy = idle_minute(
        {"idle": {**NOTHING, "invocations": 1.0}, "idle_seconds": 30.0, "keepalive": NOTHING, "connect": NOTHING}
    )
    assert added(*busy.values())["invocations"] == 2.0  # a 30 s window scaled to the minute


def test_prices_per_million_units() -> None:
    prices = load_prices()
    socket = usd({**NOTHING, "connection_minutes": 1e6, "messages": 1e6}, prices, "arm64")
    assert socket["WebSocket connection minutes"] == pytest.approx(0.25)
    assert socket["WebSocket messages"] == pytest.approx(1.00)
    assert sum(socket.values()) == pytest.approx(1.25)
    assert usd(scaled({**NOTHING, "gb_seconds": 1.0}, 1e6), prices, "x86_64")["Lambda GB-seconds"] == pytest.approx(
        16.6667
    )


def test_the_long_polls_minute_is_its_polls_their_held_time_and_reads() -> None:
    minute = {"invocations": 3, "held_seconds": 60.0, "rcu": 132.0, "wcu": 3}
    got = long_poll_minute(minute, 128)
    assert got == {**NOTHING, "invocations": 3.0, "gb_seconds": 7.5, "rru": 132.0, "wru": 3.0, "http_requests": 3.0}
    prices = load_prices()
    poll = sum(usd(got, prices, "arm64").values())
    assert poll == pytest.approx((3 * 0.20 + 7.5 * 13.3334 + 132 * 0.125 + 3 * 0.625 + 3 * 1.00) / 1e6)


def test_streaming_within_noise_compares_the_gap_with_the_two_offs_gap() -> None:
    quiet = {"on_wall": 1.01, "again_wall": 1.0, "on_cpu": 1.015, "again_cpu": 0.99}
    assert _within_noise(quiet)  # within the 2 % floor
    noisy = {"on_wall": 1.06, "again_wall": 0.93, "on_cpu": 1.0, "again_cpu": 1.0}
    assert _within_noise(noisy)  # the offs differ by 7 %
    slower = {"on_wall": 1.10, "again_wall": 1.01, "on_cpu": 1.0, "again_cpu": 1.0}
    assert not _within_noise(slower)
    assert _within_noise({"on_wall": 0.8, "again_wall": 1.0, "on_cpu": 0.9, "again_cpu": 1.0})  # faster is fine
