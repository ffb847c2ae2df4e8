"""``kvroute explain`` through the real CLI on a constructed chat trace: which earlier
request, which messages, what each engine model kept."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kvroute.cli.main import build_cli

SYSTEM = "You are the assistant of Acme Cloud. " + "Answer briefly and cite the policy. " * 20


def _chat(*messages: tuple[str, str]) -> dict[str, object]:
    return {"messages": [{"role": r, "content": c} for r, c in messages]}


def test_explain_a_follow_up_turn(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    records = [
        {"session_id": "a", "request": _chat(("system", SYSTEM), ("user", "Where is my order?"))},
        {"session_id": "b", "request": _chat(("system", SYSTEM), ("user", "Reset my password."))},
        {
            "session_id": "a",
            "request": _chat(
                ("system", SYSTEM),
                ("user", "Where is my order?"),
                ("assistant", "It ships tomorrow."),
                ("user", "Can it ship today?"),
            ),
        },
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "e.json"
    result = CliRunner().invoke(
        build_cli(),
        ["explain", str(trace), "--request", "3", "--json", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert "request 3, line 3, conversation a" in result.stdout
    assert "same conversation" in result.stdout
    e = json.loads(out.read_text())
    assert e["best_match"] == 0 and e["best_match_same_conversation"]
    system, user, assistant, user2, gen = e["segments"]
    assert system["source_request"] == 0 and system["reused_tokens"] == system["end_tokens"]
    assert (
        user["source_request"] == 0
        and user["reused_tokens"] == user["end_tokens"] - user["start_tokens"]
    )
    # of the answer only the turn header request 0 ended with (its generation prompt)
    assert assistant["reused_tokens"] < assistant["end_tokens"] - assistant["start_tokens"]
    assert user2["reused_tokens"] == 0 and gen["field"] == "generation prompt"
    assert "Acme Cloud" in system["preview"]
    kept = {k["engine"]: k["cached_tokens"] for k in e["engines"]}
    assert set(kept) == {"llamacpp", "vllm", "sglang"}
    # SGLang's radix tree keeps every token of the shared prefix (and the cached answer)
    assert kept["sglang"] >= e["reused_tokens"] and kept["vllm"] % 16 == 0


def test_explain_bad_request_number(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(_chat(("user", "hi"))) + "\n")
    result = CliRunner().invoke(build_cli(), ["explain", str(trace), "--request", "5"])
    assert result.exit_code == 2 and "has 1 requests" in result.stderr
