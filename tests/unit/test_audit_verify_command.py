"""`make audit-verify`: what it prints, and that it says why it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack import audit_verify, reconcile


def test_one_line_per_stream_then_the_overall_status() -> None:
    answer = {
        "status": "broken",
        "streams": [
            {
                "stream": "conv_1",
                "rows": 3,
                "status": "ok",
                "firstBreak": None,
                "chainStartsAt": 1,
                "unchained": 2,
                "sealedAt": "2026-12-03T10:00:00Z",
                "sealedThrough": 1,
                "redacted": [],
            },
            {
                "stream": "refund#apr_1",
                "rows": 2,
                "status": "broken",
                "firstBreak": {"eventId": "01J9", "kind": "changed"},
                "chainStartsAt": 1,
                "unchained": 0,
                "sealedAt": None,
                "sealedThrough": None,
                "redacted": ["01J9"],
            },
        ],
    }
    assert audit_verify.lines(answer) == [
        "conv_1: 3 row(s)  ok  from n=1  (2 row(s) before the chain)  sealed through n=1 at 2026-12-03T10:00:00Z",
        "refund#apr_1: 2 row(s)  broken  changed at 01J9  from n=1  not sealed  redacted_at on 01J9",
        "overall: broken",
    ]


def test_without_a_running_stack_it_exits_2_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(reconcile, "ENV_FILE", tmp_path / "env.json")
    monkeypatch.setattr(audit_verify, "ENV_FILE", tmp_path / "env.json")
    with pytest.raises(SystemExit) as exited:
        audit_verify.main(["--conversation", "conv_01J"])
    assert exited.value.code == audit_verify.CANNOT_RUN == 2
    assert "make dev" in capsys.readouterr().err
