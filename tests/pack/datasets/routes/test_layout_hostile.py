"""A layout YAML is untrusted data: bounded size, bounded alias expansion, one-line errors."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml

from carla_wds import limits
from carla_wds.pack.datasets.routes.layouts import ALLOWED, LAYOUT_DIR, load_layout

LAUGHS = "\n".join(["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"] + [
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)] + ["cameras: *a8"])


def test_billion_laughs_is_refused_quickly_and_small(tmp_path):
    """1.3 KB that stands for 10^9 values: refused before anything expands (run in a child
    with 1 GiB of address space and a timeout, since the unbounded loader needs GBs)."""
    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS + "\n")
    assert path.stat().st_size < 2000
    code = textwrap.dedent(f"""
        import resource, sys
        from carla_wds.pack.datasets.routes.layouts import load_layout
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        try:
            load_layout({str(path)!r})
        except ValueError as exc:
            print("REFUSED", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("REFUSED"), out.stdout[:500]
    assert "aliases expand to over" in out.stdout and str(path) in out.stdout
    assert len(out.stdout) < 700


def test_recursive_alias_and_deep_nesting_are_one_line(tmp_path):
    rec = tmp_path / "rec.yaml"
    rec.write_text("cameras: &c {front: *c}\n")
    with pytest.raises(ValueError, match="recursive alias"):
        load_layout(rec)
    deep = tmp_path / "deep.yaml"
    deep.write_text("cameras: " + "[" * 50000 + "]" * 50000 + "\n")
    with pytest.raises(ValueError, match="nested too deeply|deep"):
        load_layout(deep)


def test_a_layout_over_yaml_bytes_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text((LAYOUT_DIR / "tcp.yaml").read_text() + "#" * 5000 + "\n")
    with limits.using(limits.DEFAULT.with_overrides({"yaml_bytes": 4096})):
        with pytest.raises(ValueError, match="yaml_bytes=4,096"):
            load_layout(path)
    assert load_layout(path).name   # the default allows it


BAD_VALUES = [[["x"]], {"a": [1]}, [{"b": 2}], 7, "text", 1.5, True]


@pytest.mark.parametrize("key", ALLOWED)
def test_every_key_with_a_wrong_type_is_a_one_line_error(tmp_path, key):
    """No TypeError or AttributeError escapes for any key of the file, whatever its type;
    the message is short even when the value is long."""
    base = yaml.safe_load((LAYOUT_DIR / "garage.yaml").read_text())
    for i, value in enumerate(BAD_VALUES + [["y" * 50] * 2000]):
        doc = dict(base, **{key: value})
        path = tmp_path / f"{key}_{i}.yaml"
        path.write_text(yaml.safe_dump(doc))
        try:
            load_layout(path)
        except ValueError as exc:
            assert len(str(exc)) <= 600, str(exc)[:200]
            assert str(path) in str(exc)
