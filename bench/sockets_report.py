"""docs/PERFORMANCE.md's WebSocket section and its rows of the Targets table, from bench/sockets.py's results."""

from __future__ import annotations

import statistics
from typing import Any

from bench.report import md

DELTA_TARGET = 0.100  # seconds: the model's first text delta → the page (locally)
PUSH_TARGET = 0.300  # seconds: a stored event → the page
IDLE_TARGET = 1 / 50  # an idle socket's cost per minute ÷ a waiting long poll's
NOISE_FLOOR = 0.02  # "within noise": the on/off gap no larger than the two offs' gap, or than this


def _verdict(value: float | None, limit: float) -> str:
    if value is None:
        return "not measured"
    return "**met**" if value <= limit else f"**not met** (gap: {value / limit:.1f}× the target)"


def _ms(summary: dict[str, float]) -> str:
    return f"{summary['median'] * 1000:,.0f} / {summary['p95'] * 1000:,.0f}"


def latencies(s: dict[str, Any]) -> dict[str, dict[str, float]]:
    from bench.sockets import summary

    return {
        "delta socket": summary([d["socket"] for d in s["deltas"]]),
        "delta long poll": summary([d["long_poll"] for d in s["deltas"]]),
        "writing": summary([d["writing"] for d in s["deltas"]]),
        "push socket": summary([e["socket"] for e in s["events"]]),
        "push long poll": summary([e["long_poll"] for e in s["events"]]),
    }


def idle_costs(results: dict[str, Any]) -> dict[str, Any] | None:
    """The idle socket's minute by part and the feed section's waiting minute, priced; None without the feed's."""
    from bench.cost import load_prices
    from bench.sockets import added, idle_minute, long_poll_minute, usd

    s, feed = results["sockets"], results.get("feed")
    prices, arch = load_prices(), s["architecture"]
    parts = idle_minute(s)
    socket = added(*parts.values())
    out: dict[str, Any] = {"parts": parts, "socket": socket, "socket_usd": sum(usd(socket, prices, arch).values())}
    out["parts_usd"] = {name: sum(usd(run, prices, arch).values()) for name, run in parts.items()}
    if feed is None:
        return out
    poll = long_poll_minute(feed["minute"], feed["limits"]["events_memory_mb"])
    out.update(poll=poll, poll_usd=sum(usd(poll, prices, arch).values()))
    out["ratio"] = out["socket_usd"] / out["poll_usd"]
    return out


def loop_ratios(s: dict[str, Any]) -> dict[str, float]:
    from bench.loop import STREAMING_OFF, STREAMING_OFF_AGAIN, STREAMING_ON

    loop, med = s["loop"], statistics.median
    out = {}
    for clock in ("wall", "cpu"):
        off = med(loop[STREAMING_OFF][clock])
        out[f"on_{clock}"] = med(loop[STREAMING_ON][clock]) / off
        out[f"again_{clock}"] = med(loop[STREAMING_OFF_AGAIN][clock]) / off
    return out


def _within_noise(r: dict[str, float]) -> bool:
    return all(
        abs(r[f"on_{c}"] - 1) <= max(abs(r[f"again_{c}"] - 1), NOISE_FLOOR) or r[f"on_{c}"] < 1 for c in ("wall", "cpu")
    )


def target_rows(results: dict[str, Any]) -> list[list[Any]]:
    if "sockets" not in results:
        return []
    s = results["sockets"]
    lat, idle, loop = latencies(s), idle_costs(results), loop_ratios(s)
    ratio = idle.get("ratio") if idle else None
    return [
        [
            "WebSocket: the model's first text delta → the page ≤ 100 ms (median, locally)",
            f"{lat['delta socket']['median'] * 1000:.0f} ms (p95 {lat['delta socket']['p95'] * 1000:.0f} ms); the long "
            f"poll's first sight of the reply {lat['delta long poll']['median']:.2f} s",
            _verdict(lat["delta socket"]["median"], DELTA_TARGET),
        ],
        [
            "WebSocket: a stored event → the page ≤ 300 ms (median)",
            f"{lat['push socket']['median'] * 1000:.0f} ms (p95 {lat['push socket']['p95'] * 1000:.0f} ms); the long "
            f"poll {lat['push long poll']['median']:.2f} s on the same events",
            _verdict(lat["push socket"]["median"], PUSH_TARGET),
        ],
        [
            "WebSocket: an idle connected page ≤ 1/50 of a waiting long poll's cost per minute",
            f"1/{1 / ratio:,.0f} (USD {idle['socket_usd'] * 1e6:.2f} vs {idle['poll_usd'] * 1e6:.2f} per million "
            "idle minutes)"
            if idle and ratio
            else "the feed section was not measured",
            _verdict(ratio, IDLE_TARGET),
        ],
        [
            "WebSocket: the loop with streaming on within noise of off (wall / CPU)",
            f"{loop['on_wall']:.3f}× / {loop['on_cpu']:.3f}× (off again: {loop['again_wall']:.3f}× / "
            f"{loop['again_cpu']:.3f}×)",
            "**met**" if _within_noise(loop) else "**not met**",
        ],
    ]


def _usage_row(name: str, run: dict[str, float], usd: float) -> list[Any]:
    return [
        name,
        f"{run['http_requests']:.3g}",
        f"{run['invocations']:.3g}",
        f"{run['gb_seconds']:.4g}",
        f"{run['rru']:.3g}",
        f"{run['wru']:.3g}",
        f"{run['messages']:.3g}",
        f"{run['connection_minutes']:.3g}",
        f"{usd * 1e6:,.3f}",
    ]


def table(results: dict[str, Any]) -> str:
    from bench.loop import STREAMING_OFF, STREAMING_OFF_AGAIN, STREAMING_ON, STREAMING_PARSE_ONLY

    s = results["sockets"]
    lat, idle = latencies(s), idle_costs(results)
    feed_lat = None
    if "feed" in results:
        from bench.sockets import summary

        feed_lat = summary([x["latency"] for x in results["feed"]["latency"]])
    timing = [
        [
            f"the model's first text delta → the page sees the reply ({len(s['deltas'])} turns)",
            _ms(lat["delta socket"]),
            _ms(lat["delta long poll"]),
            f"the model writes the reply over {lat['writing']['median']:.2f} s (first → last text frame); the long "
            "poll sees nothing before the stored message",
        ],
        [
            f"a stored event → the page ({len(s['events'])} notifications, both clients on each)",
            _ms(lat["push socket"]),
            _ms(lat["push long poll"]),
            f"the stream polled every {s['stream_poll_seconds']} s, as Lambda polls a shard",
        ],
    ]
    if feed_lat:
        timing.append(
            [
                "a stored event → the page, the event feed section's (EventsFunction's handler on moto)",
                "",
                _ms(feed_lat),
                "",
            ]
        )
    head = [
        "per idle page",
        "HTTP API requests",
        "invocations",
        "GB-s",
        "RRU",
        "WRU",
        "messages",
        "conn. min",
        "USD per million minutes",
    ]
    cost_rows = []
    if idle:
        for name, run in idle["parts"].items():
            cost_rows.append(_usage_row(f"· {name}", run, idle["parts_usd"][name]))
        cost_rows.append(_usage_row("**the WebSocket, a minute**", idle["socket"], idle["socket_usd"]))
        if "poll" in idle:
            cost_rows.append(
                _usage_row("**the long poll, a minute** (the event feed section's)", idle["poll"], idle["poll_usd"])
            )
    loop, med = s["loop"], statistics.median
    off = loop[STREAMING_OFF]
    loop_rows = [
        [
            name,
            med(loop[name]["wall"]),
            med(loop[name]["cpu"]),
            f"{med(loop[name]['wall']) / med(off['wall']):.3f}×",
            f"{med(loop[name]['cpu']) / med(off['cpu']):.3f}×",
        ]
        for name in (STREAMING_OFF, STREAMING_ON, STREAMING_PARSE_ONLY, STREAMING_OFF_AGAIN)
        if name in loop
    ]
    ratio = f"; the WebSocket costs 1/{1 / idle['ratio']:,.0f} of the long poll" if idle and "ratio" in idle else ""
    return (
        "## The WebSocket channel\n\n"
        "**How soon the page sees it** (milliseconds, median / p95; one page following one conversation over a "
        "WebSocket and the long poll at once, on the local stack)\n\n"
        + md(["from → to", "WebSocket ms", "long poll ms", "note"], timing)
        + f"\n\n**An idle page's cost per minute** (us-east-1 list prices, bench/aws_prices.json{ratio})\n\n"
        + md(head, cost_rows)
        + f"\n\n**The loop with streaming on and off** (median of {len(off['wall'])} turns each, interleaved; "
        f"{loop['_posts_per_turn']:.1f} posts per turn)\n\n"
        + md(["3-iteration turn, in-memory store", "wall ms", "CPU ms", "× off (wall)", "× off (CPU)"], loop_rows)
    )


def note(results: dict[str, Any]) -> str:
    s = results["sockets"]
    keepalive = ", ".join(s.get("keepalive_answer") or []) or "nothing"
    return f"""How it is measured (`bench/sockets.py`): the local stack (`make dev`'s, in a process of its own) with the
simulated model writing a streamed reply over {s["writing_seconds"]} s, and one customer's page following one
conversation two ways at once: a `websockets` client (a ticket from `POST /api/ws-ticket`, then `subscribe` from the
feed's cursor) and the long poll (`waitSeconds=20`, poll after poll). Every clock is `perf_counter` in one process:
the model's first text frame flushed (its HTTP handler's writes wrapped), each client's receipt, a notification's
TransactWriteItems answering. The text delta's time is mostly the coalescing (`sockets/deltas.py`: a post every 64
characters or 50 ms; a first piece shorter than 64 waits the 50 ms), then one `@connections` post. A stored event
waits for the stream's next poll (0–{s["stream_poll_seconds"]} s; Lambda polls a shard four times a second), then
SocketPushFunction claims and posts it. The long poll's times are its backoff's (the event feed section).

The idle page's minute: a connection minute; its idle window ({s["idle_seconds"]:.0f} s measured: no invocation, no
DynamoDB request), the chat page's keepalive every 5 minutes (API Gateway closes a connection idle for 10): a
`ping` frame that API Gateway answers itself (the route's MOCK integration: no function runs), counted as measured:
answered {keepalive} (two messages); and a new connection every 2 hours
(API Gateway's limit): the ticket (an HTTP API request, EventsFunction), `$connect` (counted as a message: an
assumption, the pricing page names messages and minutes only), `subscribe` and its answer, `$disconnect`, on warm
functions. Lambda's GB-seconds are the local invocations' wall time × the deployed memory (the local worker's IPC
included: an overestimate). A WebSocket protocol ping (a control frame) is not what API Gateway's idle timer is
documented to count, and a browser's page cannot send one: the data frame is what the page sends and is priced.

The loop with streaming (bench/loop.py's `streaming`, the instant model: a turn of a few milliseconds with no model
time in it, where any fixed cost shows): *streamed, posted nowhere* is the streamed request and its SSE parse with a
sink that keeps nothing; *streaming on* adds the turn's `DeltaPublisher`, whose posts are made by a kept thread
(`sockets/deltas.py`: the first text piece hands the turn to it, `close` waits for its last post), so its cost is two
hand-overs between threads per turn. Against a real model's seconds per call both are fractions of a
millisecond."""
