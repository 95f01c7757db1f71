"""SimLingo's processor and collate step on adapter="simlingo" samples, unchanged
(RenzKa/simlingo@eb2b89a simlingo_training/dataloader/datamodule.py DataModule.dl_collate_fn,
utils/internvl2_utils.py): tests/golden/simlingo_processor.json.

    /tmp/golden_venv/bin/pip install transformers
    /tmp/golden_venv/bin/pip install --no-deps open_clip_torch   # for its tokenizer file only
    /tmp/golden_venv/bin/python -m tools.golden.simlingo_processor --repo-dir /tmp/golden_src/simlingo

The routes of tools/golden/simlingo.py are packed (garage_lb2_simlingo) with their commentary
overlay; CARLAWebData(adapter="simlingo") batches become per-sample records
(simlingo_samples) and go into their dl_collate_fn as they are. For each record, their own
Data_Driving gives the same frame with the same prompt (their random draws scripted to the
branch and option ours drew), and dl_collate_fn runs on those too: every tensor and string of
the two DrivingExamples must be equal, run_id (the measurement path: absolute in theirs,
relative to the data root in ours) aside.

No model weights can be had here, so three things stand in for InternVL2-1B's (none is
SimLingo's code): the tokenizer is CLIP's BPE that open_clip ships
(open_clip/bpe_simple_vocab_16e6.txt.gz) as a transformers CLIPTokenizer, with the chat
template's tokens added as special tokens and no BOS/EOS added (as InternVL2-1B's Qwen2
tokenizer); InternVL's conversation.py (fetched from the model hub by their
get_custom_chat_template) is CONVERSATION below, its 'internlm2-chat' template; and
get_num_image_tokens_per_patch (AutoConfig of the model) returns InternVL2-1B's 256
((448 / 14)^2 * 0.5^2). Stubs as tools/golden/simlingo.py, plus line_profiler's decorator.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np

from tools.golden import common, simlingo

BLOBS = {**simlingo.BLOBS,
         "simlingo_training/dataloader/datamodule.py": "142e9f133182d8596b01dd3b4ee9667bd3703aa5",
         "simlingo_training/utils/internvl2_utils.py": "79f1dbdd3e0a9776a95f900797d653109aed843a"}
ENCODER = "OpenGVLab/InternVL2-1B"
IMAGE_TOKENS = 256
CHAT_TOKENS = ["<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>"]
OUT = simlingo.OUT.with_name("simlingo_processor.json")
CONVERSATION = '''
import copy, dataclasses

@dataclasses.dataclass
class Conversation:
    name: str
    system_template: str
    system_message: str
    roles: tuple
    sep: str
    messages: list = dataclasses.field(default_factory=list)

    def append_message(self, role, message):
        self.messages.append([role, message])

    def get_prompt(self):   # SeparatorStyle.MPT
        ret = self.system_template.format(system_message=self.system_message) + self.sep
        for role, message in self.messages:
            ret += role + message + self.sep if message else role
        return ret

TEMPLATES = {"internlm2-chat": Conversation(
    "internlm2-chat", "<|im_start|>system\\n{system_message}",
    "You are an AI assistant whose name is InternLM.",
    ("<|im_start|>user\\n", "<|im_start|>assistant\\n"), "<|im_end|>")}

def get_conv_template(name):
    return copy.deepcopy(TEMPLATES[name])
'''


def clip_tokenizer():
    """CLIP's BPE as open_clip ships it, as a transformers tokenizer (vocabulary built as
    CLIP's own SimpleTokenizer builds it); its folder is found without importing open_clip."""
    from transformers import CLIPTokenizer
    spec = importlib.util.find_spec("open_clip")
    path = Path(list(spec.submodule_search_locations)[0]) / "bpe_simple_vocab_16e6.txt.gz"
    text = gzip.open(path, "rt", encoding="utf-8").read()
    merges = text.split("\n")[1:49152 - 256 - 2 + 1]
    bytes_ = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars = bytes_ + [256 + i for i, b in enumerate(b for b in range(256) if b not in bytes_)]
    base = [chr(c) for c in chars]
    vocab = base + [v + "</w>" for v in base] + ["".join(m.split()) for m in merges] + \
        ["<|startoftext|>", "<|endoftext|>"]
    tok = CLIPTokenizer(vocab={v: i for i, v in enumerate(vocab)},
                        merges=[tuple(m.split()) for m in merges])
    tok._tokenizer.post_processor = None
    tok.add_special_tokens({"additional_special_tokens": CHAT_TOKENS})
    return tok, hashlib.sha256(path.read_bytes()).hexdigest()


def _stubs(work: Path) -> None:
    profiler = types.ModuleType("line_profiler")
    profiler.profile = lambda f: f
    sys.modules.setdefault("line_profiler", profiler)
    simlingo._stubs(work)
    utils = sys.modules["hydra.utils"]
    utils.to_absolute_path = lambda p: str(work / p)
    utils.instantiate = None   # setup() only; dl_collate_fn never calls it
    sys.modules["hydra"].main = lambda **kw: (lambda f: f)   # their test() entry point
    folder = work / "pretrained" / ENCODER.split("/")[1]
    folder.mkdir(parents=True)
    (folder / "conversation.py").write_text(CONVERSATION)


class _Cfg(dict):
    __getattr__ = dict.__getitem__


def _flat(value: Any, at: str = "") -> dict[str, Any]:
    """Every leaf of a DrivingExample: name -> tensor / list / None."""
    if hasattr(value, "_fields"):
        return {k: v for f in value._fields for k, v in _flat(getattr(value, f),
                                                              f"{at}.{f}".strip(".")).items()}
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        return {k: v for f in value for k, v in _flat(value[f], f"{at}.{f}").items()}
    return {at: value}


def _same(a: Any, b: Any) -> bool:
    import torch
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape \
            and bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _numbers(value: Any) -> np.ndarray:
    """Every number of a nested value (tensors, arrays, lists, dicts by key order), flat."""
    if isinstance(value, dict):
        value = [value[k] for k in sorted(value)]
    if isinstance(value, (list, tuple)):
        parts = [_numbers(v) for v in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(value, np.float64).ravel()


def _diff(a: Any, b: Any) -> float | None:
    """Largest absolute difference of two values' numbers (None: not numbers, or not the
    same count)."""
    try:
        x, y = _numbers(a), _numbers(b)
    except (TypeError, ValueError):
        return None
    return float(np.abs(x - y).max(initial=0.0)) if x.shape == y.shape else None


def _describe(value: Any) -> Any:
    import torch
    if isinstance(value, torch.Tensor):
        return [str(value.dtype), list(value.shape),
                hashlib.sha256(value.contiguous().numpy().tobytes()).hexdigest()]
    return type(value).__name__


def _theirs_like(ds, index: dict[str, int], root: Path, ours) -> Any:
    """Their Data_Driving sample of the same frame whose prompt and answer are ours."""
    i = index[ours.measurement_path]
    want = [ours.conversation[0]["content"][0]["text"], ours.answer[0]["content"][0]["text"]]
    for draws in simlingo.BRANCHES.values():
        for k in range(2):
            out = simlingo._item(ds, i, draws, k)
            if simlingo._texts(out) == want:
                return out
    raise SystemExit(f"{ours.measurement_path}: their loader never gives {want}")


def _pack(raw: Path, work: Path) -> Path:
    """The routes packed, then their commentary tree written and packed as an overlay."""
    from carla_wds.pack import PackOptions, pack
    from carla_wds.pack.overlay import pack_overlay
    from carla_wds.pack.synth.overlays import raw_routes, synth_overlay
    pack(raw, work / "shards", PackOptions(layout="garage_lb2_simlingo", progress=False))
    ovl = simlingo.OVERLAY
    synth_overlay(raw / "commentary", ovl["kind"], raw_routes(raw / "data", ovl["kind"]),
                  raw / "data", coverage=ovl["coverage"], unmatched=ovl["unmatched"],
                  seed=ovl["seed"])
    pack_overlay(raw / "commentary", work / "shards", work / "commentary", ovl["kind"])
    return work


def run(repo_dir: Path, raw: Path, work: Path) -> dict:
    common.check_pinned(repo_dir, BLOBS, simlingo.COMMIT)
    common.numpy2_aliases()
    _stubs(work)
    sys.path.insert(0, str(repo_dir))
    from simlingo_training.dataloader import datamodule   # noqa: E402 - theirs
    from simlingo_training.dataloader.dataset_driving import Data_Driving  # noqa: E402
    datamodule.get_num_image_tokens_per_patch = lambda variant: IMAGE_TOKENS
    tok, tok_sha = clip_tokenizer()
    dm = datamodule.DataModule(base_dataset=_Cfg(use_1d_wps=False), processor=tok,
                               encoder_variant=ENCODER, use_global_img=False)
    (work / "data").mkdir(exist_ok=True)
    (work / "data" / "augmented_templates").symlink_to(repo_dir / "data" /
                                                         "augmented_templates")
    (work / "database").symlink_to(raw)
    ds = Data_Driving(**{**simlingo.SETTINGS, "use_commentary": True})
    index = {Path(simlingo._item(ds, i, simlingo.BRANCHES["driving"], 0).measurement_path)
             .relative_to(work / "database").as_posix(): i for i in range(len(ds))}
    return _compare(dm, ds, index, work, tok_sha)


def _compare(dm, ds, index: dict[str, int], work: Path, tok_sha: str) -> dict:
    from carla_wds.load import CARLAWebData
    from carla_wds.load.adapters.simlingo import simlingo_samples
    data = CARLAWebData(str(work / "shards"), adapter="simlingo", batch_size=4, mode="eval",
                        seed=2, overlays=[str(work / "commentary")])
    batches = []
    for batch in data:
        ours = [s for s, ok in zip(simlingo_samples(batch), batch["valid"].tolist()) if ok]
        theirs = [_theirs_like(ds, index, work / "database", s) for s in ours]
        got, want = _flat(dm.dl_collate_fn(ours)), _flat(dm.dl_collate_fn(theirs))
        assert got.keys() == want.keys()
        batches.append({"measurement_paths": [s.measurement_path for s in ours],
                        "prompts": [simlingo._texts(s) for s in ours],
                        "equal": {k: _same(got[k], want[k]) for k in got},
                        "max_abs_diff": {k: _diff(got[k], want[k]) for k in got
                                         if not _same(got[k], want[k]) and k != "run_id"},
                        "ours": {k: _describe(v) for k, v in got.items()}})
    return {"tokenizer": {"file": "open_clip/bpe_simple_vocab_16e6.txt.gz", "sha256": tok_sha,
                          "class": "transformers CLIPTokenizer", "added": CHAT_TOKENS},
            "image_tokens_per_patch": IMAGE_TOKENS, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-dir", type=Path, required=True)
    args = parser.parse_args()
    raw = Path(tempfile.mkdtemp(prefix="golden_simlingo_raw_"))
    raw_sha = common.synth_routes(raw, simlingo.SYNTH)
    work = _pack(raw, Path(tempfile.mkdtemp(prefix="golden_simlingo_proc_")))
    ovl = simlingo.OVERLAY
    os.chdir(work)
    doc = {"schema": common.SCHEMA, "project": "simlingo", "repo": simlingo.REPO,
           "commit": simlingo.COMMIT, "files": BLOBS, "synth": simlingo.SYNTH,
           "overlay": ovl, "raw_sha256": raw_sha,
           "step": "simlingo_training/dataloader/datamodule.py DataModule.dl_collate_fn",
           "regenerate": "python -m tools.golden.simlingo_processor --repo-dir "
                         "PATH_TO_simlingo_AT_" + simlingo.COMMIT[:7],
           **run(args.repo_dir.resolve(), raw, work)}
    common.write_golden(OUT, doc)
    print(f"wrote {OUT}: {len(doc['batches'])} batches")


if __name__ == "__main__":
    main()
