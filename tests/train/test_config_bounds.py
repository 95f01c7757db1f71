"""Issue 38 N7 and Low 11: every config value that sizes an allocation has an upper bound, one
rule for YAML files, `key=value` overrides and a checkpoint's stored config; YAML aliases and
shared references are counted before anything walks or prints them."""
from __future__ import annotations

import pytest

from carla_wds.train.config import ConfigError, TrainConfig, config_from_dict, load_config, to_dict
from tests.train.test_config import TINY


@pytest.mark.parametrize("override,expected", [
    # the values issue 38 reported from a checkpoint: 3 GB in 7.5 s, or past the machine's RAM
    ("data.image_size=[30000,30000]", ["data.image_size=[30000, 30000] is invalid",
                                       "item 30000: out of range", "<= 4096"]),
    ("data.history=1000000", ["data.history=1000000", "integer >= 0 and <= 256"]),
    ("model.feature_dim=100000000", ["model.feature_dim=100000000", ">= 1 and <= 4096"]),
    ("data.batch_size=100000", ["data.batch_size=100000", ">= 1 and <= 4096"]),
    ("data.eval_batch_size=5000", ["data.eval_batch_size=5000", "<= 4096"]),
    ("data.shuffle_buffer=10000000", ["data.shuffle_buffer=10000000", "<= 20000"]),
    ("data.num_workers=100000", ["data.num_workers=100000", "<= 256"]),
    ("data.history_stride=1000000", ["data.history_stride=1000000", "<= 1000"]),
    ("show_samples=1000000", ["show_samples=1000000", "<= 256"]),
])
def test_sizes_have_upper_bounds_naming_key_value_and_range(override, expected):
    for load in (lambda: load_config(TINY, [override]), lambda: _from_checkpoint(override)):
        with pytest.raises(ConfigError) as exc:
            load()
        msg = str(exc.value)
        assert "\n" not in msg and "Fix: e.g." in msg, msg
        for part in expected:
            assert part in msg, (part, msg)


def _from_checkpoint(override: str) -> TrainConfig:
    """The override's value written into a stored config dict, as a checkpoint holds it."""
    import yaml
    key, _, raw = override.partition("=")
    data = to_dict(TrainConfig())
    *parents, name = key.split(".")
    section = data
    for part in parents:
        section = section[part]
    section[name] = yaml.safe_load(raw)
    return config_from_dict(data)


def test_values_within_their_bounds_cannot_multiply_past_a_batchs_pixels():
    # each value within its bound: 256 x 4096 x 4096 is 4.3e9 pixels a camera a batch
    with pytest.raises(ConfigError, match=r"data.image_size: data.image_size=\[4096, 4096\] with "
                                          r"batches of 256 .* expected at most 2\^31 .*Fix"):
        load_config(TINY, ["data.image_size=[4096,4096]", "data.batch_size=256",
                           "data.eval_batch_size=16"])
    with pytest.raises(ConfigError, match="data.history=255 is 4.29e\\+09 pixels"):
        load_config(TINY, ["data.image_size=[512,1024]", "data.history=255"])
    # real sizes pass: TransFuser++'s 256 x 1024 at 32, and a 32-frame clip at 256 x 512
    load_config(TINY, ["data.image_size=[256,1024]", "data.batch_size=32"])
    load_config(TINY, ["data.image_size=[256,512]", "data.batch_size=4", "data.history=31"])


def laughs(levels: int) -> str:
    """A YAML flow list whose last item stands for 10^levels strings: aliases of aliases."""
    items = ["&a0 [" + ", ".join(["lol"] * 10) + "]"] + [
        f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def test_billion_laughs_in_a_config_file_is_refused_before_expanding(tmp_path):
    # 10^6 strings in 400 bytes (10^9 is as cheap to refuse: nothing is expanded); the
    # unbounded reader built them and printed them all in its type error
    path = tmp_path / "laughs.yaml"
    path.write_text("model:\n  backbone: tiny\ndata:\n  cameras: " + laughs(6) + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert "aliases expand to over 10,000 values" in msg and str(path) in msg, msg[:500]
    assert "expected a training config" in msg and len(msg) < 400, msg[:500]
    path.write_text("data:\n  cameras: " + laughs(9) + "\n")   # 10^9
    with pytest.raises(ConfigError, match="aliases expand to over 10,000"):
        load_config(path)


def test_billion_laughs_in_an_override_is_refused_before_expanding():
    value = laughs(6)
    with pytest.raises(ConfigError) as exc:
        load_config(TINY, [f"data.cameras={value}"])
    msg = str(exc.value)
    assert msg.startswith("override 'data.cameras=") and "aliases expand to over 10,000" in msg
    assert len(msg) < 1200, len(msg)


def test_a_stored_config_of_shared_references_is_counted_before_it_is_read():
    """A checkpoint's config comes from a pickle, whose memo shares objects as aliases do:
    10^6 strings in 7 lists. The old reader printed all of them in its type error."""
    leaf: list = ["lol"] * 10
    for _ in range(5):
        leaf = [leaf] * 10
    data = to_dict(TrainConfig())
    data["data"]["cameras"] = leaf
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data, "--checkpoint ck.pt's config")
    msg = str(exc.value)
    assert msg.startswith("--checkpoint ck.pt's config: over 10,000 values"), msg[:300]
    assert len(msg) < 400, len(msg)
    loop: list = []
    loop.append(loop)
    data["data"]["cameras"] = loop
    with pytest.raises(ConfigError, match="a list or mapping inside itself"):
        config_from_dict(data)


def test_a_long_value_is_cut_short_in_the_error():
    data = to_dict(TrainConfig())
    data["data"]["image_size"] = [5000] * 3000
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data)
    assert "data.image_size=[5000, 5000" in str(exc.value) and len(str(exc.value)) < 800
