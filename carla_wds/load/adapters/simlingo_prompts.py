"""The prompt and answer of SimLingo's driving task, written from RenzKa/simlingo@eb2b89a
simlingo_training/dataloader/dataset_driving.py Data_Driving.__getitem__ (l.83-117 commentary,
l.234-272 prompt) and dataset_base.py get_navigational_conditioning (l.481-537), for
route_as 'target_point_command'.

Every draw comes from the sample's generator, in their order: the commentary augmentation's
(rng.random() < 0.6, then a template), the LMDrive command's (a template group, then a
sentence), then the prompt type and its option. Their `random.random()` is `rng.random()` and
their `random.choice(seq)` is `seq[rng.integers(len(seq))]`, so the same draws give the same
strings (tests/load/adapters/test_simlingo_model.py feeds both the same draws).

Two options need their template files (data/augmented_templates/ in their repository), which
carla-wds does not ship: `use_lmdrive_commands` (lmdrive.json, a third option phrased as
LMDrive's instructions) and `commentary_augmentation` (commentary_augmented.json, the
commentary rephrased in 60% of samples). `Templates.read(folder)` reads them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TARGET_OPTION = "Target waypoint: <TARGET_POINT><TARGET_POINT>."
COMMENTARY_PROB = 0.5     # prompt_probabilities {driving: 1, commentary: 1}, normalised
AUGMENT_PROB = 0.6        # l.105: "we only augment in 60% of the cases"
# map_command (dataset_base.py l.502-509) and command_template_mappings (l.510-517)
COMMANDS = {1: "go left at the next intersection", 2: "go right at the next intersection",
            3: "go straight at the next intersection", 4: "follow the road",
            5: "do a lane change to the left", 6: "do a lane change to the right"}
LMDRIVE_GROUPS = {1: (0, 2, 4, 7), 2: (1, 3, 5, 8), 3: (6, 9), 4: (38, 40, 42, 43, 44, 45),
                  5: (34, 36), 6: (35, 37)}


@dataclass(frozen=True)
class Templates:
    """Their template files' contents: lmdrive.json (group index -> sentences with [x]) and
    commentary_augmented.json (commentary template -> rephrasings); None: that option off."""
    lmdrive: dict[str, list[str]] | None = None
    commentary: dict[str, list[str]] | None = None

    @classmethod
    def read(cls, folder: str | Path, lmdrive: bool = True, commentary: bool = True
             ) -> "Templates":
        """Their data/augmented_templates folder; a missing file is one line naming it."""
        def load(name: str) -> dict[str, list[str]]:
            path = Path(folder) / name
            if not path.is_file():
                raise ValueError(f"SimLingo templates: {path} not found; pass their "
                                 "data/augmented_templates folder (RenzKa/simlingo)")
            return json.loads(path.read_text(encoding="utf-8"))
        return cls(load("lmdrive.json") if lmdrive else None,
                   load("commentary_augmented.json") if commentary else None)


def _choice(seq: list[str] | tuple, rng: np.random.Generator) -> Any:
    return seq[int(rng.integers(len(seq)))]


def command_option(target_point: np.ndarray, command: int, next_command: int) -> str:
    """get_navigational_conditioning's command sentence (l.518-528): the distance is
    int(|target_point|) m; 'then <next>' only where the next command differs."""
    now, after = COMMANDS[command], COMMANDS[next_command]
    then = f" then {after}" if after != now else ""
    if command == 4:
        return f"Command: {now}{then}."
    return f"Command: {now} in {int(np.linalg.norm(target_point))} meter{then}."


def target_options(target_points: np.ndarray, command: int, next_command: int,
                   templates: Templates, rng: np.random.Generator) -> list[str]:
    """Their target_options (l.492-535), in their order: the target-point placeholder, the
    command sentence and, with lmdrive templates, an LMDrive sentence for the command."""
    out = [TARGET_OPTION, command_option(target_points[0], command, next_command)]
    if templates.lmdrive is not None:
        group = _choice(LMDRIVE_GROUPS[command], rng)
        said = _choice(templates.lmdrive[str(group)], rng)
        out.append(f"Command: {said.replace('[x]', str(int(np.linalg.norm(target_points[0]))))}.")
    return out


def commentary_text(entry: Any, measurement_path: str, templates: Templates,
                    rng: np.random.Generator) -> str | None:
    """The commentary of an overlay entry as their loader uses it (l.85-117); None where they
    have none: no entry, or a validation route. With commentary templates, 60% of samples get
    a rephrasing with the entry's placeholders filled (the entry's own text where one stays)."""
    if not isinstance(entry, dict) or "validation_" in measurement_path:
        return None
    text = str(entry["commentary"])
    if templates.commentary is not None and rng.random() < AUGMENT_PROB:
        phrasings = templates.commentary.get(entry.get("commentary_template"))
        if phrasings:
            said = _choice(phrasings, rng)
            for key, value in (entry.get("placeholder") or {}).items():
                said = said.replace(key, value) if key in said else said
            text = text if re.search(r"<.*?>", said) else said
    return text.replace("..", ".").replace("in in", "in")


def prompt_answer(speed: float, options: list[str], commentary: str | None,
                  rng: np.random.Generator) -> tuple[str, str]:
    """The driving task's prompt and answer (dataset_driving.py l.236-272)."""
    head = f"Current speed: {round(speed, 1)} m/s."
    drawn = rng.random()           # prompt_random: drawn with or without a commentary
    if commentary is not None and drawn < COMMENTARY_PROB:
        if rng.random() < 0.2:     # the commentary as the prompt
            if rng.random() < 0.5:
                prompt = f"{head} {_choice(options, rng)} {commentary} Predict the waypoints."
            else:
                prompt = f"{head} Command: {commentary} Predict the waypoints."
            answer = "Waypoints:"
        else:                      # the commentary to predict
            prompt = f"{head} {_choice(options, rng)} What should the ego do next?"
            answer = f"{commentary} Waypoints:"
    else:
        prompt, answer = f"{head} {_choice(options, rng)} Predict the waypoints.", "Waypoints:"
    return prompt.replace("..", "."), answer.replace("..", ".")
