"""``kvroute presets`` lists what ``simulate --model/--gpu`` accept."""

from __future__ import annotations

from click.testing import CliRunner

from kvroute.cache.capacity import load_presets
from kvroute.cli.main import build_cli


def test_presets_lists_every_model_and_gpu_with_its_sizes() -> None:
    result = CliRunner().invoke(build_cli(), ["presets"])
    assert result.exit_code == 0, result.output
    presets = load_presets()
    for name in (*presets.models, *presets.gpus):
        assert f"\n {name} " in "\n" + result.output or f"\n{name} " in "\n" + result.output
    assert "128 KiB" in result.output  # llama-3.1-8b's KV per token at 16 bits
    assert "NVIDIA H100 80GB HBM3" in result.output
