"""What each config field accepts, declared once next to the field, and one validator for all.

    batch_size: int = setting(16, ge=1, doc="per rank")
    device: str = setting("auto", choices=("auto", "cpu", "cuda"))

`validate(cfg)` walks a (nested) config dataclass and raises ConfigError for the first value its
rule refuses, naming the dotted key, the value, what is valid and the fix (the default as an
example). A dataclass may also define `cross_checks()` for rules that join two fields.
Nothing here imports the rest of carla_wds, so model.py and config.py can both use it.
"""
from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

_MISSING = dataclasses.MISSING


class ConfigError(ValueError):
    """A config value that cannot run; the message is one line with the key and the fix."""


@dataclass(frozen=True)
class Rule:
    """Bounds (numbers, or each item of a list of numbers), choices and list shape."""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    or_path: bool = False        # besides the choices, any other string is a path
    length: int | None = None    # exact list length
    nonempty: bool = False
    unique: bool = False
    doc: str = ""                # what the value means, repeated in errors

    def bounds(self, integer: bool) -> str:
        kind = "an integer" if integer else "a number"
        parts = [f"{op} {_num(v)}" for op, v in
                 ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt)) if v is not None]
        return kind + (" " + " and ".join(parts) if parts else "")

    def number_ok(self, v: float) -> bool:
        return not ((self.ge is not None and v < self.ge) or (self.gt is not None and v <= self.gt)
                    or (self.le is not None and v > self.le) or (self.lt is not None and v >= self.lt))


def setting(default: Any = _MISSING, *, default_factory: Callable[[], Any] | Any = _MISSING,
            **rule: Any) -> Any:
    """A dataclass field with its Rule in the field's metadata."""
    return field(default=default, default_factory=default_factory,
                 metadata={"rule": Rule(**rule)})


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def as_override(value: Any) -> str:
    """A value the way one writes it in a `key=value` override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    return json.dumps(value)


def shown(value: Any, width: int = 200) -> str:
    """`as_override(value)` cut to `width` characters: for error messages, which must stay one
    line whatever a file holds."""
    text = as_override(value)
    return text if len(text) <= width else text[:width] + f"... ({len(text):,} characters)"


def _item_type(tp: Any) -> Any:
    """int for int, list[int] and int | None; str for list[str] | None."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is list:
        return args[0]
    if args and len(args) == 1:
        return _item_type(args[0])
    return tp


def describe(rule: Rule, tp: Any, optional: bool) -> str:
    """What the rule accepts, in words."""
    item = _item_type(tp)
    if rule.choices:
        text = ", ".join(rule.choices)
        text = f"{text}, or the path of a file" if rule.or_path else f"one of {text}"
    elif item in (int, float):
        text = rule.bounds(item is int)
    else:
        text = {str: "a non-empty string" if rule.nonempty and not _is_list(tp) else "a string",
                bool: "true or false"}.get(item, f"a {item}")
    if _is_list(tp):
        count = str(rule.length) if rule.length else "one or more" if rule.nonempty else "any"
        kind, _, rest = text.partition(" ")[2].partition(" ")
        text = " ".join(w for w in ("a list of", count, "distinct" if rule.unique else "",
                                    kind + "s", rest) if w)
    if optional:
        text += ", or null"
    return text + (f" ({rule.doc})" if rule.doc else "")


def _is_list(tp: Any) -> bool:
    if typing.get_origin(tp) is list:
        return True
    return any(typing.get_origin(a) is list for a in typing.get_args(tp))


def problem(rule: Rule, value: Any, tp: Any) -> str | None:
    """Why `value` breaks `rule` (None: it does not)."""
    if value is None:
        return None   # the type allows null, or _coerce would have refused it
    if isinstance(value, list):
        if rule.length is not None and len(value) != rule.length:
            return f"{len(value)} items, not {rule.length}"
        if rule.nonempty and not value:
            return "it is empty"
        repeated = sorted({str(v) for v in value if value.count(v) > 1})
        if rule.unique and repeated:
            return f"{', '.join(repeated)} repeated"
        return next((f"item {v!r}: {why}" for v in value
                     if (why := problem(rule, v, _item_type(tp)))), None)
    if isinstance(value, str) and rule.nonempty and not value.strip():
        return "it is empty"
    if rule.choices:
        if value in rule.choices:
            return None
        close = next((c for c in rule.choices if c.lower() == str(value).strip().lower()), None)
        if close:
            return f"did you mean {close}?"
        if rule.or_path and str(value).strip():
            return None   # a path; whether it exists is checked before the run starts
        return "not among them"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):   # .inf passes `gt=0` and trains at NaN loss
            return "not a finite number"
        return None if rule.number_ok(value) else "out of range"
    return None


def _fix(key: str, f: dataclasses.Field, rule: Rule, tp: Any, optional: bool) -> str:
    default = f.default if f.default is not _MISSING else (
        f.default_factory() if f.default_factory is not _MISSING else None)
    if default is not None and problem(rule, default, tp) is None:
        return f"e.g. {key}={as_override(default)} (the default)"
    return f"e.g. {key}=null (the default)" if optional else f"set {key} as described"


def fields_with_rules(obj: Any) -> Iterator[tuple[dataclasses.Field, Any, Rule]]:
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        yield f, hints[f.name], f.metadata.get("rule", Rule())


def validate(obj: Any, prefix: str = "") -> None:
    """Raise ConfigError for the first field of `obj` (recursively) that its Rule refuses."""
    for f, tp, rule in fields_with_rules(obj):
        value, key = getattr(obj, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            validate(value, key + ".")
            continue
        why = problem(rule, value, tp)
        if why is not None:
            optional = type(None) in typing.get_args(tp)
            raise ConfigError(f"{key}={shown(value)} is invalid ({why}): expected "
                              f"{describe(rule, tp, optional)}. Fix: "
                              f"{_fix(key, f, rule, tp, optional)}")
    for name, text in getattr(obj, "cross_checks", lambda: ())():
        raise ConfigError(f"{prefix}{name}: {text}")
