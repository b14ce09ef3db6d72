"""Running the SDK's async client from the loop's synchronous code.

A Lambda handler's thread runs no event loop, so ``anyio.run`` is enough there; a caller already inside one (a
test harness, a local server) gets the call on a short-lived thread of its own instead of an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio

T = TypeVar("T")


def run_sync(fn: Callable[[], Awaitable[T]]) -> T:
    """``fn()`` awaited to completion; its exception raised here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, fn).result()
