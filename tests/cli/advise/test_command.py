"""``kvroute advise`` end to end on the sample trace, its outputs, and its bad input."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kvroute.cli import main

pytestmark = pytest.mark.slow


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main.build_cli(), list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "sample.jsonl"
    assert run("sample", str(path), "-n", "300")[0] == 0
    return path


@pytest.fixture(scope="module")
def advised(sample: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("advise") / "out"
    code, _, stderr = run("advise", str(sample), "--out", str(out), "--workers", "1", "-q")
    assert code == 0, stderr
    return out


def test_outputs(advised: Path) -> None:
    names = sorted(p.name for p in advised.iterdir())
    assert names == ["advice.json", "alerts.yaml", "gateway.yaml", "launch-vllm.sh", "report.html"]
    advice = json.loads((advised / "advice.json").read_text())
    assert advice["schema"] == "kvroute.advise/1" and advice["scope"] == "per_class"
    assert {c["workload"] for c in advice["classes"]} >= {"chat", "tools"}
    for c in advice["classes"]:
        rules = {x["rule"] for x in c["citations"]}
        assert {
            "min_class_requests",
            "switching_margin",
            "band_prior",
            "capacity_share_of_ideal",
        } <= rules
        assert all(x["field"] and x["threshold"] for x in c["citations"])
        assert c["capacity"]["sweep"] and c["prior"]["band"] in (
            "equivalent",
            "grey_zone",
            "radix_pays",
        )
    assert os.access(advised / "launch-vllm.sh", os.X_OK)
    html = (advised / "report.html").read_text()
    assert html.index(advice["headline"].split(".")[0]) < html.index("Scores") < html.index("<svg")
    states = {
        r["labels"]["state"]
        for r in yaml.safe_load((advised / "alerts.yaml").read_text())["groups"][0]["rules"]
        if "alert" in r
    }
    assert {"watch", "canary"} <= states


def test_gateway_yaml_passes_serve_check(
    advised: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # capture: a relative directory, created by --check
    code, stdout, stderr = run("serve", "--config", str(advised / "gateway.yaml"), "--check")
    assert code == 0, stderr
    assert stdout.startswith("ok: 1 backend,")


def test_current_config_becomes_a_diff_and_moves_get_a_canary(
    sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    current = tmp_path / "now.yaml"
    current.write_text("backends:\n  - {name: l, url: 'http://127.0.0.1:9', engine: llamacpp}\n")
    out = tmp_path / "out"
    code, _, stderr = run(
        "advise", str(sample), "--out", str(out), "--current", str(current), "--workers", "1",
        "--team-size", "12", "--ops", "high", "--gpu", "cpu", "--model", "smollm2-135m", "-q",
    )  # fmt: skip
    assert code == 0, stderr
    advice = json.loads((out / "advice.json").read_text())
    assert advice["changes"] and all(c["current"] == "llamacpp" for c in advice["changes"])
    gateway = yaml.safe_load((out / "gateway.yaml").read_text())
    moved = [c for c in advice["classes"] if c["move"] != "stay"]
    assert moved  # SGLang clears a 12-person team's margin on some class
    for c in moved:
        route = next(r for r in gateway["routes"] if r["name"] == c["workload"])
        assert route["pool"] == "llamacpp" and route["canary"]["pool"] == c["engine"]
    monkeypatch.chdir(tmp_path)
    assert run("serve", "--config", str(out / "gateway.yaml"), "--check")[0] == 0


def test_exposed_config_has_a_closed_key_placeholder(
    sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    code, _, stderr = run(
        "advise", str(sample), "--out", str(out), "--exposure", "internet", "--workers", "1", "-q"
    )
    assert code == 0, stderr
    gateway = yaml.safe_load((out / "gateway.yaml").read_text())
    assert gateway["keys"] == [{"name": "replace-me", "sha256": "0" * 64}]
    monkeypatch.chdir(tmp_path)
    assert run("serve", "--config", str(out / "gateway.yaml"), "--check")[0] == 0


def test_too_small_a_trace_says_how_many_would_do(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    run("sample", str(small), "-n", "30")
    out = tmp_path / "out"
    code, _, stderr = run("advise", str(small), "--out", str(out), "--workers", "1")
    assert code == 3
    assert "30 requests are too few to decide on: advise needs at least 100" in stderr
    assert "Traceback" not in stderr and not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "ttft_p99=fast"], "cannot read --slo item 'ttft_p99=fast'"),
        (["--slo", "ttft_p99=1s,ttft_p99=2s"], "names ttft_p99 twice"),
        (["--model", "llama-3.1-70b", "--gpu", "l4"], "leaves no KV memory on 1 x NVIDIA L4"),
        (["--engines", "tgi"], "unknown engine 'tgi'"),
        (["--team-size", "0"], "--team-size must be at least 1"),
        (["--evidence", "latency"], "latency evidence needs --slo"),
        (["--evidence", "psychic"], "unknown advise evidence 'psychic' (valid: hits, latency)"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(
    sample: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    code, _, stderr = run("advise", str(sample), "--out", str(out), *args)
    assert code == 2
    assert stderr.startswith("error: ") and message in stderr.splitlines()[0]
    assert "Traceback" not in stderr and not out.exists()


def test_an_slo_scores_predicted_latency_and_the_report_shows_it(
    sample: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    slo = "ttft_p99=2s,tpot_p99=100ms"
    code, _, stderr = run("advise", str(sample), "--out", str(out), "--slo", slo, "-q")
    assert code == 0, stderr
    advice = json.loads((out / "advice.json").read_text())
    assert advice["inputs"]["evidence"] == "slo_attainment"
    assert advice["inputs"]["evidence_fallback"] is None
    for c in advice["classes"]:
        for s in c["scores"]:
            lat = s["latency"]
            assert lat["ttft_p99_s"] > 0 and set(lat["attainment"]) == {"ttft_p99", "tpot_p99"}
            assert isinstance(lat["saturated"], bool) and lat["verdict"]
        assert any(x["rule"] == "slo_target" for x in c["citations"])
        assert c["capacity"]["sweep"]  # capacity still from cache hits
    html = (out / "report.html").read_text()
    assert "TTFT p99" in html and "within ttft_p99" in html
    assert "predicted TTFT p99 by class and engine" in html


def _calibration(engine: str) -> dict[str, object]:
    """A shipped h100 fit, relabelled as a kvroute calibrate result for ``engine``."""
    text = resources.files("kvroute.predict").joinpath("priors.json").read_text("utf-8")
    cal = next(c for c in json.loads(text)["calibrations"] if c["hardware"] == "h100-80gb")
    return {**cal, "engine": engine, "source": "calibrate"}


def test_a_calibration_directory_replaces_the_prior(sample: Path, tmp_path: Path) -> None:
    cal = tmp_path / "cal"
    cal.mkdir()
    (cal / "llamacpp.json").write_text(json.dumps(_calibration("llamacpp")))
    out = tmp_path / "out"
    args = ["--slo", "ttft_p99=2s", "--calibration", str(cal), "--team-size", "1", "-q"]
    code, _, stderr = run("advise", str(sample), "--out", str(out), *args)
    assert code == 0, stderr
    advice = json.loads((out / "advice.json").read_text())
    lat = {s["engine"]: s["latency"] for s in advice["classes"][0]["scores"]}
    assert lat["llamacpp"]["calibration_source"] == "calibrate"
    assert not any(s["uses_prior"] for s in lat.values())
    assert not any(n.startswith("uses_prior") for n in advice["notes"])


def test_bad_calibrations_are_one_line_errors(sample: Path, tmp_path: Path) -> None:
    cal = tmp_path / "cal"
    cal.mkdir()
    (cal / "a.json").write_text(json.dumps(_calibration("vllm")))
    (cal / "b.json").write_text(json.dumps(_calibration("vllm")))
    out = tmp_path / "out"
    code, _, stderr = run("advise", str(sample), "--out", str(out), "--calibration", str(cal))
    assert code == 2 and "two calibrations for vllm (b.json)" in stderr.splitlines()[0]
    (cal / "b.json").write_text("{not json")
    code, _, stderr = run("advise", str(sample), "--out", str(out), "--calibration", str(cal))
    assert code == 3 and "cannot read calibration" in stderr.splitlines()[0]
    assert "Traceback" not in stderr and not out.exists()


def test_an_slo_on_a_gpu_without_speed_data_falls_back_to_hits_and_says_why(
    sample: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code, _, stderr = run(
        "advise", str(sample), "--out", str(out), "--slo", "ttft_p99=1s", "--gpu", "l4", "-q"
    )
    assert code == 0, stderr
    advice = json.loads((out / "advice.json").read_text())
    assert advice["inputs"]["evidence"] == "prefill_saved"
    assert "GPU 'l4' has no speed data" in advice["inputs"]["evidence_fallback"]
    assert any(
        n.startswith("--slo is not scored: GPU 'l4' has no speed data") for n in advice["notes"]
    )
    assert "latency asked for, not possible" in (out / "report.html").read_text()


def test_a_non_empty_out_is_refused_without_force(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, stderr = run("advise", str(sample), "--out", str(out), "--workers", "1")
    assert code == 2 and "is not empty" in stderr and (out / "keep.txt").exists()
    code, _, stderr = run(
        "advise", str(sample), "--out", str(out), "--workers", "1", "--force", "-q"
    )
    assert code == 0, stderr
    assert not (out / "keep.txt").exists() and (out / "advice.json").exists()


def test_a_capacity_bound_hash_only_trace_is_led_by_capacity(tmp_path: Path) -> None:
    # 30 documents of 40 blocks (20k tokens) read in turn: a 600k-token working set
    # against a ~47k-token pool (SmolLM2, 1 GiB on the CPU), so LRU keeps nothing
    trace = tmp_path / "mooncake.jsonl"
    lines = []
    for i in range(300):
        doc = i % 30
        hashes = [doc * 1000 + b for b in range(40)] + [100_000 + i]
        lines.append(
            json.dumps(
                {
                    "timestamp": i * 1000,
                    "input_length": 41 * 512,
                    "output_length": 16,
                    "hash_ids": hashes,
                }
            )
        )
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code, stdout, stderr = run(
        "advise", str(trace), "--out", str(out), "--gpu", "cpu", "--model", "smollm2-135m"
    )
    assert code == 0, stderr
    advice = json.loads((out / "advice.json").read_text())
    assert advice["trace"]["prompt_form"] == "block_hashes"
    assert advice["headline"].startswith(
        "KV capacity, not the engine, is the lever for 100% of requests"
    )
    (only,) = advice["classes"]
    assert only["workload"] == "completion" and only["lever"] == "capacity"
    cap = only["capacity"]
    assert cap["value_at_pool"] < 0.1
    assert only["overlap"] > 0.8
    assert (
        cap["pool_for_target_tokens"] is not None
        and cap["pool_for_target_tokens"] > 8 * cap["pool_tokens"]
    )
    assert advice["headline"] in stdout


def two_pool_trace(path: Path) -> Path:
    """Four documents of 40 blocks (20k tokens) in pairs of requests, in turn: an 82k-token
    working set against a ~47k-token pool (SmolLM2, 1 GiB on the CPU). One instance keeps
    about half; two, each holding the two documents session routing sends it, keep all;
    round robin sends every document to both and keeps nothing."""
    lines = []
    for i in range(300):
        doc = (i // 2) % 4
        hashes = [doc * 1000 + b for b in range(40)] + [100_000 + i]
        lines.append(
            json.dumps(
                {
                    "timestamp": i * 1000,
                    "input_length": 41 * 512,
                    "output_length": 16,
                    "hash_ids": hashes,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_working_set_of_two_pools_gets_two_replicas_behind_cache_aware_routing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = two_pool_trace(tmp_path / "two-pools.jsonl")
    out = tmp_path / "out"
    code, _, stderr = run(
        "advise",
        str(trace),
        "--out",
        str(out),
        "--gpu",
        "cpu",
        "--model",
        "smollm2-135m",
        "--engines",
        "vllm,sglang",
        "--url",
        "vllm=http://127.0.0.1:9100",
        "-q",
    )
    assert code == 0, stderr
    advice = json.loads((out / "advice.json").read_text())
    (only,) = advice["classes"]
    assert only["engine"] == "vllm" and only["lever"] == "capacity"
    reps = only["capacity"]["replicas"]
    assert reps["num_replicas"] == 2 and reps["advised"] is True
    assert reps["cache_aware"] > only["capacity"]["value_at_pool"] + 0.05 > reps["round_robin"]
    rule = next(c for c in only["citations"] if c["rule"] == "replicas_advised")
    assert rule["outcome"] == "run 2 replicas"
    (flags,) = advice["flags"]
    assert flags["engine"] == "vllm" and flags["replicas"] == 2
    config = yaml.safe_load((out / "gateway.yaml").read_text())
    backends = [(b["name"], b["url"], b["pool"]) for b in config["backends"]]
    assert backends == [
        ("vllm-1", "http://127.0.0.1:9100", "vllm"),
        ("vllm-2", "http://127.0.0.1:9110", "vllm"),
    ]
    assert {r["policy"] for r in config["routes"]} == {"cache_aware"}
    script = (out / "launch-vllm.sh").read_text()
    assert "PORTS=(9100 9110)" in script
    assert "advised: the deployment runs them" in (out / "report.html").read_text()
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = run("serve", "--config", str(out / "gateway.yaml"), "--check")
    assert code == 0, stderr
    assert stdout.startswith("ok: 2 backends,")


def test_one_pool_that_holds_the_working_set_gets_one_instance(advised: Path) -> None:
    advice = json.loads((advised / "advice.json").read_text())
    assert all(not c["capacity"]["replicas"]["advised"] for c in advice["classes"])
    assert [f["replicas"] for f in advice["flags"]] == [1]
    assert "PORTS=" not in (advised / "launch-vllm.sh").read_text()
