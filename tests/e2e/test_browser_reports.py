"""The lead console's Reports page in a real browser, on `make dev`'s stack (issue 35's "done when").

Today's hand-made day (tests/unit/test_rollup.py: six conversations, refunds direct and approved, hand-offs,
ratings) is written into the local stack's moto; the deployed DailyRollupFunction runs through the stack's own
function pool with its schedule's event; a lead signs in on the console, follows its Reports link, and the page
draws its four charts (a canvas with pixels drawn in each) with the day's figures in the tables under them.
Screenshot in tests/e2e/artifacts/.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3

from devstack.events import scheduled_event
from devstack.local import REGION, LocalStack
from tests.e2e.conftest import PageWatch
from tests.integration.test_reports_api import seed_day

ROLLUP = "DailyRollupFunction"
# A canvas with anything drawn on it: some pixel not fully transparent.
DRAWN = """el => { const c = el.querySelector('canvas'); if (!c || !c.width || !c.height) return false;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true; return false; }"""


def test_the_reports_page_draws_the_seeded_day(
    seeded_stack: LocalStack, page: tuple[Any, PageWatch], screenshot: Callable[[Any, str], Path]
) -> None:
    from playwright.sync_api import expect

    today = datetime.now(UTC).date().isoformat()
    session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
    seed_day(seeded_stack.stack, today, session.client("dynamodb", endpoint_url=seeded_stack.moto_url))
    result = seeded_stack.pools[ROLLUP].invoke(scheduled_event(ROLLUP, REGION))
    assert today in result["days"], result

    pg, watch = page
    pg.goto(f"{seeded_stack.url}/lead.html")
    pg.click("#signin-lead-1")
    expect(pg.locator("#app")).to_be_visible()
    pg.click("[data-testid=reports-link]")
    expect(pg.locator("#app")).to_be_visible()
    row = pg.locator(f"[data-testid=table-rates] tr[data-day='{today}']")
    expect(row).to_contain_text("33.3 %")  # 2 of 6 resolved, 2 of 6 escalated
    expect(row).to_contain_text("6")
    refunds = pg.locator(f"[data-testid=table-refunds] tr[data-day='{today}']")
    expect(refunds).to_contain_text("10.00 EUR + 37.00 USD")
    times = pg.locator(f"[data-testid=table-times] tr[data-day='{today}'] td")
    expect(times).to_have_text([f"{today} (so far)", "10 min", "2.0 h", "60 s", "11 min", "3", "4"])
    ratings = pg.locator(f"[data-testid=table-ratings] tr[data-day='{today}'] td")
    expect(ratings).to_have_text([f"{today} (so far)", "66.7 %", "75.0 %", "3", "3", "1"])
    for chart in ("rates", "refunds", "times", "ratings"):
        box = pg.locator(f"[data-testid=chart-{chart}]")
        expect(box.locator("canvas")).to_have_count(1)
        assert box.evaluate(DRAWN), f"chart {chart} drew nothing"
    watch.settle(pg)
    screenshot(pg, "01-reports")
    watch.assert_clean(pg)

    # The CSV download: the same day, as a file.
    with pg.expect_download() as download:
        pg.click("[data-testid=csv]")
    saved = Path(download.value.path()).read_text()
    assert saved.splitlines()[0].startswith("day,complete,conversations") and f"{today},False,6," in saved
