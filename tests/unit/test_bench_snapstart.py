"""`make bench`'s simulated-SnapStart cold rows: one variant per API-facing function, and their Targets rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.coldstart import BENCH_WEBHOOK_SECRET, SNAPSTART, Variant, snapstart_variants
from bench.report import snapstart_target_rows

X = "\u00d7"  # the multiplication sign the report writes


def _variant(name: str, group: str, total: float, imported: float = 500.0) -> Variant:
    v = Variant(name, Path("python"), Path("app.py"), None, {}, group)
    v.runs = [{"total_ms": total, "import_ms": imported}, {"total_ms": total + 2, "import_ms": imported}]
    return v


def _results(*variants: Variant) -> dict[str, Any]:
    chat = _variant("chat", "ours", 900.0)
    return {"cold": [chat, _variant("baseline (boto3 GetItem)", "baseline", 100.0), *variants], "runs": 2}


def test_one_snapstart_variant_per_function_with_its_handler_and_environment() -> None:
    vs = snapstart_variants(
        {
            "chat": ("functions/chat/app.py", "ChatFunction", {}),
            "webhook": ("functions/payments_webhook/app.py", "PaymentsWebhookFunction", {}),
        }
    )
    assert [v.name for v in vs] == [f"chat, {SNAPSTART}", f"webhook, {SNAPSTART}"]
    assert all(v.group == "snapstart" for v in vs)
    assert vs[0].handler.parts[-2:] == ("chat", "app.py") and vs[0].function == "ChatFunction"
    assert vs[0].env == {} and vs[1].env == {"STRIPE_WEBHOOK_SECRET": BENCH_WEBHOOK_SECRET}


def test_a_target_row_per_simulated_snapstart_function_against_the_baseline() -> None:
    rows = snapstart_target_rows(
        _results(
            _variant(f"mcp, {SNAPSTART}", "snapstart", 120.0), _variant(f"socket, {SNAPSTART}", "snapstart", 150.0)
        )
    )
    assert [r[0] for r in rows] == [
        f"cold path with SnapStart (simulated) ≤ 1.3{X} baseline: mcp",
        f"cold path with SnapStart (simulated) ≤ 1.3{X} baseline: socket",
    ]
    assert rows[0][1].startswith(f"1.20{X}") and rows[0][2].startswith("**met**")  # medians 121 / 101
    assert rows[1][1].startswith(f"1.50{X}") and rows[1][2].startswith(f"**not met** (gap: 1.2{X}")
    assert all("restore latency not measured" in r[2] for r in rows)


def test_no_rows_without_a_cold_section_or_snapstart_variants() -> None:
    assert snapstart_target_rows({}) == []
    assert snapstart_target_rows(_results()) == []
