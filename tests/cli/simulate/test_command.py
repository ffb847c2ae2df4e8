"""``kvroute simulate`` end to end through the real CLI (hash-only and tokenized traces),
and its bad-input paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvroute.cli import main
from kvroute.cli.simulate.capacity import parse_tokens


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main.build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def mooncake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Mooncake-style hash-only trace: shared system blocks, follow-up turns."""
    path = tmp_path_factory.mktemp("trace") / "mooncake.jsonl"
    lines = []
    next_id = 100
    prev: list[int] = []
    for i in range(150):
        system = [1, 2, 3] if i % 2 else [7, 8]
        ids = system + list(range(next_id, next_id + 1 + i % 4))
        next_id += 1 + i % 4
        if i % 5 == 0 and i:
            ids = [*prev, next_id]  # a follow-up turn of the previous request
            next_id += 1
        prev = ids
        lines.append(
            json.dumps(
                {
                    "timestamp": i * 200,
                    "input_length": len(ids) * 512 - 100,
                    "output_length": 40,
                    "hash_ids": ids,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_hash_only_trace_json_html_and_sweep(
    monkeypatch: pytest.MonkeyPatch, mooncake: Path, tmp_path: Path
) -> None:
    out_json, out_html = tmp_path / "s.json", tmp_path / "s.html"
    code, out, err = run(
        monkeypatch,
        "simulate",
        str(mooncake),
        "--capacity-tokens",
        "16k",
        "--sweep-sizes",
        "8k,64k",
        "--json",
        str(out_json),
        "--html",
        str(out_html),
    )
    assert code == 0, err
    assert "Prefix cache by engine" in out and "ideal cache" in out
    r = json.loads(out_json.read_text())
    assert r["schema"] == "kvroute.simulate/1"
    assert r["trace"]["prompt_form"] == "block_hashes" and r["trace"]["block_size_tokens"] == 512
    assert r["capacity"]["tokens"] == 16000 and r["capacity"]["source"] == "tokens"
    assert [e["engine"] for e in r["engines"]] == ["llamacpp", "vllm", "sglang"]
    for e in r["engines"]:
        assert e["unit_tokens"] == 512 and 0 <= e["hit_ratio"] <= 1
        assert e["cached_tokens"] + e["computed_tokens"] <= e["prompt_tokens"]
        assert e["per_request_hit"]["count"] == e["num_admitted"]
    assert [c["capacity_tokens"] for c in r["sweep"]] == [[8000, 64000]] * 3
    assert r["ideal"]["granularity"] == "block"
    html = out_html.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") >= 4
    assert "Hit ratio vs KV capacity" in html
    # the page says the 4 slots it modelled are llama-server's default, as the terminal does
    assert "llama.cpp slots</th><td>4 slots: llama-server&#x27;s default --parallel" in html


def test_unbounded_matches_the_ideal_without_outputs(
    monkeypatch: pytest.MonkeyPatch, mooncake: Path
) -> None:
    code, out, err = run(
        monkeypatch,
        "simulate",
        str(mooncake),
        "--capacity-tokens",
        "inf",
        "--no-cache-outputs",
        "--engines",
        "vllm,sglang",
        "--json",
        "-",
        "-q",
    )
    assert code == 0, err
    r = json.loads(out)
    ideal = r["ideal"]
    vllm, sglang = r["engines"]
    assert vllm["capacity_tokens"] is None and vllm["evicted_tokens"] == 0
    # Each engine recomputes at most one token (SGLang) or one block (vLLM) per request.
    assert 0 <= ideal["reusable_tokens"] - sglang["cached_tokens"] <= r["trace"]["num_requests"]
    assert (
        0
        <= ideal["block_reusable_tokens"] - vllm["cached_tokens"]
        <= 512 * r["trace"]["num_requests"]
    )


def test_tokenized_log_with_model_sized_pool(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sample = tmp_path / "sample.jsonl"
    assert run(monkeypatch, "sample", str(sample), "-n", "120")[0] == 0
    code, out, err = run(
        monkeypatch,
        "simulate",
        str(sample),
        "--workers",
        "1",
        "--model",
        "smollm2-135m",
        "--gpu",
        "1GiB",
        "--gpu-util",
        "0.5",
        "--overhead-gib",
        "0.1",
        "--json",
        "-",
        "-q",
    )
    assert code == 0, err
    r = json.loads(out)
    assert r["trace"]["prompt_form"] == "tokens" and r["trace"]["tokenizer"]
    cap = r["capacity"]
    assert cap["source"] == "model_and_gpu" and cap["kv_bytes_per_token"] == 23040
    assert (
        cap["tokens"]
        == (cap["gpu_memory_bytes"] // 2 - cap["weight_bytes"] - cap["overhead_bytes"]) // 23040
    )
    assert r["engines"][1]["unit_tokens"] == 16 and r["engines"][2]["unit_tokens"] == 1
    assert r["engines"][0]["peak_pinned_bytes"] == r["engines"][0]["peak_pinned_tokens"] * 23040


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engines", "vllm,trtllm"], "valid: llamacpp, sglang, vllm"),
        (["--capacity-tokens", "lots"], "cannot read --capacity-tokens 'lots'"),
        (["--capacity-tokens", "80GiB"], "--capacity-tokens counts tokens"),
        (["--capacity-tokens", "80 GB"], "is a size in bytes"),
        (["--capacity-tokens", "2.5"], "not a whole number of tokens"),
        (["--capacity-tokens", "1.0005k"], "not a whole number of tokens"),
        (["--sweep-sizes", "64k,512B"], "--sweep-sizes counts tokens"),
        (["--sweep-sizes", "64k,inf"], "--sweep-sizes takes finite token counts, not 'inf'"),
        (["--capacity-tokens", "1k", "--gpu", "h100-80gb"], "--gpu sizes the pool"),
        (["--model", "gpt-9"], "unknown model"),
        (["--sweep-sizes", "0"], "positive sizes"),
    ],
)
def test_usage_errors(
    monkeypatch: pytest.MonkeyPatch, mooncake: Path, args: list[str], message: str
) -> None:
    code, _, err = run(monkeypatch, "simulate", str(mooncake), *args)
    assert code == 2 and message in err
    assert "Traceback" not in err


def test_capacity_hints_show_token_counts_for_token_options(
    monkeypatch: pytest.MonkeyPatch, mooncake: Path
) -> None:
    # The hint of a token option must never suggest a byte size as its value.
    for args in (["--capacity-tokens", "lots"], ["--sweep-sizes", "lots"]):
        code, _, err = run(monkeypatch, "simulate", str(mooncake), *args)
        hint = err.split("hint:", 1)[1]
        assert code == 2 and "64k" in hint and "GiB" not in hint
    _, _, err = run(monkeypatch, "simulate", str(mooncake), "--capacity-tokens", "80GiB")
    assert "--model" in err and "--gpu" in err


@pytest.mark.parametrize(
    ("given", "tokens"), [("65536", 65536), ("64k", 64000), ("64Ki", 65536), ("1.5M", 1500000)]
)
def test_capacity_token_counts(
    monkeypatch: pytest.MonkeyPatch, mooncake: Path, tmp_path: Path, given: str, tokens: int
) -> None:
    out = tmp_path / "r.json"
    code, _, err = run(
        monkeypatch, "simulate", str(mooncake), "--capacity-tokens", given, "--json", str(out), "-q"
    )
    assert code == 0, err
    assert json.loads(out.read_text())["capacity"]["tokens"] == tokens


def test_missing_trace_is_an_input_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, _, err = run(
        monkeypatch, "simulate", str(tmp_path / "nope.jsonl"), "--capacity-tokens", "1k"
    )
    assert code == 3 and "error:" in err


def test_a_long_trace_on_the_python_sources_says_how_to_go_faster(
    monkeypatch: pytest.MonkeyPatch, mooncake: Path
) -> None:
    from kvroute import _accel
    from kvroute.cli.simulate import command as simulate

    monkeypatch.setattr(simulate, "SLOW_HINT_REQUESTS", 100)  # the fixture has 150 requests
    monkeypatch.setattr(_accel, "active", lambda package: False)
    code, out, err = run(monkeypatch, "simulate", str(mooncake), "--capacity-tokens", "16k")
    assert code == 0, err
    assert "replaying with the Python sources" in out and "compiled build" in out
    monkeypatch.setattr(simulate, "SLOW_HINT_REQUESTS", 1000)
    code, out, _ = run(monkeypatch, "simulate", str(mooncake), "--capacity-tokens", "16k")
    assert code == 0 and "Python sources" not in out


def test_sweep_rows_print_capacities_as_the_options_read_them(
    monkeypatch: pytest.MonkeyPatch, mooncake: Path
) -> None:
    """64k is 64,000 tokens and 64Ki 65,536, in what the user types and in what is printed;
    a row's capacity pasted back into --capacity-tokens gives the same pool."""
    code, out, err = run(
        monkeypatch,
        "simulate",
        str(mooncake),
        "--capacity-tokens",
        "64Ki",
        "--sweep-sizes",
        "64k,64Ki,3584",
    )
    assert code == 0, err
    assert "KV pool: 64Ki tokens" in out
    rows = [line.split()[0] for line in out.splitlines() if line.strip().endswith(("%", "rej.)"))]
    capacities = [r for r in rows if r[0].isdigit()]
    assert capacities == ["3.5Ki", "64k", "64Ki"], out
    assert [parse_tokens(c, "row") for c in capacities] == [3584, 64000, 65536]
