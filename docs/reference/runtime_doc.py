"""A griffe extension for the API pages: a class whose body sets `__doc__ = <another>.__doc__`
(CARLAWebData takes its argument docs from carla_wds/load/loader_doc.py, to keep its module
within the size rule) gets that runtime docstring, so the site shows what help() shows."""
from __future__ import annotations

import importlib
from typing import Any

import griffe


class RuntimeDocstring(griffe.Extension):
    def on_class(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.docstring is not None or "__doc__" not in cls.members:
            return
        module = importlib.import_module(cls.module.path)
        doc = getattr(module, cls.name).__doc__
        if doc:
            cls.docstring = griffe.Docstring(doc, parent=cls)
