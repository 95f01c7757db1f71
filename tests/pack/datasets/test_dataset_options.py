"""A dataset's own pack options live in its room (pack/datasets/<name>/), not in PackOptions:
PackOptions carries them as one mapping (dataset_options) that the layout's dataset checks, the
CLI adds their flags from the registry, and a manifest's pack_args keeps the keys it always had.
"""
from __future__ import annotations

from dataclasses import fields

import pytest

from carla_wds.pack import PackOptions
from carla_wds.pack.errors import PackError

# PackOptions.identity() (the manifest's pack_args, the resume journal's header) before
# issue 25, key for key and in order (commit e906302), plus issue 27's route_shards
PACK_ARGS = ["layout", "pred_len", "max_samples", "max_bytes", "route_shards", "prefix",
             "image_format", "quality",
             "resize", "part", "on_error", "check_images", "dot_replacement", "all_frames",
             "stride", "split", "subset", "handedness", "box_radius", "sensors",
             "box_visibility", "expert_pairing"]


def test_pack_options_hold_no_dataset_field_and_pack_args_stay():
    own = {f.name for f in fields(PackOptions)}
    assert not own & {"stride", "split", "subset", "handedness", "box_radius", "sensors",
                      "box_visibility", "expert_pairing"}
    assert list(PackOptions().identity()) == PACK_ARGS
    b2d = PackOptions(layout="bench2drive", dataset_options={"stride": 1, "sensors": ("lidar",)})
    assert list(b2d.identity()) == PACK_ARGS
    assert b2d.identity()["stride"] == 1 and b2d.identity()["subset"] == "train"
    assert PackOptions.of(layout="bench2drive", stride=1).dataset_options == {"stride": 1}


@pytest.mark.parametrize("layout, given, message", [
    ("bench2drive", {"stride": 0}, "--stride 0: expected a whole number >= 1. Fix: pass e.g. "
                                   "--stride 5"),
    ("bench2drive", {"handedness": "up"}, "--handedness up: expected left or right. Fix:"),
    ("bench2drive", {"subset": "test"}, "--subset test: expected one of ['train', 'val', 'all']"),
    ("bench2drive", {"box_radius": -1}, "--box-radius -1: expected metres > 0. Fix:"),
    ("bench2drive", {"sensors": ("lidar", "sonar")}, "--sensors lidar,sonar: expected distinct "
                                                     "names from ['lidar', 'boxes'"),
    ("tcp", {"stride": 5}, "--stride 5: expected --layout bench2drive. Fix: leave --stride out "
                           "for --layout tcp"),
    ("garage", {"nope": 1}, "dataset option 'nope' 1: expected one of ['box_radius', "),
])
def test_the_layouts_dataset_checks_its_options(layout, given, message):
    with pytest.raises(PackError) as info:
        PackOptions(layout=layout, dataset_options=given).validate()
    assert str(info.value).startswith(message) and "\n" not in str(info.value), info.value


def test_an_option_at_its_default_is_accepted_for_any_layout():
    PackOptions(layout="tcp", dataset_options={"handedness": "left", "subset": "train"}).validate()


def test_the_cli_passes_a_datasets_flags_to_its_room(raw_tcp, tmp_path, cli):
    from carla_wds.pack.datasets import all_options, option_owners
    shown = cli("pack", "--help").output
    assert all(o.flag in shown and option_owners(o.name) for o in all_options())
    out = tmp_path / "out"
    result = cli("pack", raw_tcp, out, "--layout", "tcp", "--stride", "5")
    assert result.exit_code != 0
    assert "--stride 5: expected --layout bench2drive" in result.output, result.output
    assert not out.exists()


def test_the_keywords_pack_options_took_before_still_work():
    """PackOptions(stride=1), opts.stride and dataclasses.replace(opts, stride=2) keep working
    after the options moved into their room; a keyword nothing owns is a TypeError naming
    both lists."""
    import dataclasses
    opts = PackOptions(layout="bench2drive", stride=1, box_visibility="flag")
    assert opts.dataset_options == {"stride": 1, "box_visibility": "flag"}
    assert (opts.stride, opts.handedness, opts.subset) == (1, "left", "train")
    again = dataclasses.replace(opts, stride=2)
    assert again.dataset_options == {"stride": 2, "box_visibility": "flag"}
    assert again.identity() == PackOptions.of(layout="bench2drive", stride=2,
                                              box_visibility="flag").identity()
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['strid'\].*'stride'"):
        PackOptions(strid=1)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        opts.nothing  # noqa: B018


def test_another_datasets_options_never_reach_a_builtin_layouts_manifest():
    """Registering a dataset with an option of its own leaves a built-in layout's pack_args
    (manifest bytes, resume identity) as they were; its own layout lists the option."""
    from carla_wds.pack import datasets as registry
    from carla_wds.pack.datasets import Dataset, DatasetOption

    class Toy(Dataset):
        options = (DatasetOption("toy_depth", "--toy-depth", "toy", 3, int),)

    saved = dict(registry._REGISTRY)
    try:
        registry.register("toyopts", Toy())
        assert list(PackOptions().identity()) == PACK_ARGS
        assert list(PackOptions(layout="toyopts").identity()) == [*PACK_ARGS, "toy_depth"]
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)


def test_an_unknown_layout_name_lists_every_registered_layout():
    with pytest.raises(PackError, match=r"unknown layout 'nope'; built-in layouts are \[.*"
                                        r"'bench2drive'.*'tcp'.*\], or pass a path"):
        PackOptions(layout="nope").validate()
