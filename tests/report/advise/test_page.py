"""The advise page, from the advice `kvroute advise` makes of a sample log: the decision
first, a section per class, every flag, the gateway config as written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

from kvroute.advise.result import Advice
from kvroute.cli import main
from kvroute.cli.advise import command
from kvroute.report.advise.page import advise_page
from kvroute.report.page.html import Callout, Code, Table, render_page

pytestmark = pytest.mark.slow
NOW = datetime(2026, 1, 1, tzinfo=UTC)
GATEWAY_YAML = "backends:\n  - name: <vllm-1>\n"


@pytest.fixture(scope="module")
def advice(tmp_path_factory: pytest.TempPathFactory) -> Advice:
    """The Advice the command renders (caught on its way to the writers)."""
    tmp = tmp_path_factory.mktemp("advise")
    cli = main.build_cli()
    assert CliRunner().invoke(cli, ["sample", str(tmp / "s.jsonl"), "-n", "300"]).exit_code == 0
    caught: list[Advice] = []
    render = command.render_outputs

    def keep(advice: Advice, *args: Any, **kwargs: Any) -> dict[str, bytes]:
        caught.append(advice)
        return render(advice, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(command, "render_outputs", keep)
        argv = ["advise", str(tmp / "s.jsonl"), "--out", str(tmp / "out"), "--workers", "1", "-q"]
        result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.stderr
    (one,) = caught
    return one


def test_the_decision_leads_and_every_class_has_its_section(advice: Advice) -> None:
    page = advise_page(advice, NOW, GATEWAY_YAML)
    first = page.lead[0]
    assert isinstance(first, Callout) and first.text == advice.headline
    titles = [s.title for s in page.sections]
    assert titles[0] == "Scores"
    assert [t for t in titles if t.startswith("Class ")] == [
        f"Class {d.workload}" for d in advice.classes
    ]
    assert page.subtitle == advice.trace.path


def test_every_flag_and_the_replica_count_of_each_engine_is_tabled(advice: Advice) -> None:
    page = advise_page(advice, NOW, GATEWAY_YAML)
    (flags,) = next(s for s in page.sections if s.title == "Flags").blocks
    assert isinstance(flags, Table)
    named = [(row[1], row[2]) for row in flags.rows]
    for f in advice.flags:
        for fl in f.flags:
            assert (fl.flag, fl.value or "") in named
        assert ("replicas", str(f.replicas)) in named


def test_the_gateway_config_is_shown_as_written_and_escaped(advice: Advice) -> None:
    page = advise_page(advice, NOW, GATEWAY_YAML)
    (code,) = next(s for s in page.sections if s.title == "gateway.yaml").blocks
    assert code == Code(GATEWAY_YAML)
    html = render_page(page)
    assert "name: &lt;vllm-1&gt;" in html and "<vllm-1>" not in html
