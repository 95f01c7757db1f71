"""`carla-wds pack --help` and `synth --help` name every built-in layout: the --layout help
is made from the registry (carla_wds.pack.datasets.builtin_layouts), so it cannot go stale."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from carla_wds.cli import main
from carla_wds.pack.datasets import builtin_layouts


def _layout_help(command: str) -> set[str]:
    """The words of the --layout option's help in `carla-wds COMMAND --help`."""
    result = CliRunner().invoke(main, [command, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    block = re.search(r"--layout TEXT(.*?)(?=\n  --)", result.output, re.S)
    assert block, result.output
    return set(re.findall(r"[A-Za-z0-9_]+", block.group(1)))


@pytest.mark.parametrize("command", ["pack", "synth"])
def test_help_lists_every_builtin_layout(command):
    layouts = builtin_layouts()
    assert "bench2drive" in layouts and "tcp_roach" in layouts
    missing = [name for name in layouts if name not in _layout_help(command)]
    assert not missing, f"carla-wds {command} --help lacks layouts {missing}"


def test_synth_writes_every_layout_its_help_names():
    """What synth's help offers, synth can write (the registry is the one list)."""
    from carla_wds.pack import synth
    writable = set(synth.synth_layouts())
    assert set(builtin_layouts()) <= writable


def test_version_and_webdataset_is_a_test_dependency_only():
    """`carla-wds --version` names the package's version; webdataset, which no package module
    imports, is in the test extra, not in the runtime dependencies (issue 28)."""
    import tomllib
    from pathlib import Path

    import carla_wds
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"carla-wds, version {carla_wds.__version__}"
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("webdataset")]
    assert any(d.startswith("webdataset") for d in project["optional-dependencies"]["test"])
    sources = Path(carla_wds.__file__).parent.rglob("*.py")
    assert not [p for p in sources if re.search(r"^\s*(import|from) webdataset", p.read_text(), re.M)]
