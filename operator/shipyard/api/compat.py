"""Reading objects from the cluster with models that forbid extra fields (to catch mistakes in
the code): the fields a model does not know are dropped first, at every level.

Two kinds of such fields reach the operator: kopf's own bookkeeping next to ours in `status`,
and version skew. Helm upgrades apply the new CRDs first, and the API server fills in a newer
CRD's scalar defaults (e.g. `spec.agent.install`), so an older operator meets fields it does
not know yet. The API server prunes fields its schema does not know, so those are the only
unknown fields there can be."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def known_fields(model: type[BaseModel], data: Any) -> Any:
    """`data` with only the fields `model` (and its nested models) knows, by alias."""
    if not isinstance(data, dict):
        return data
    fields = {(info.alias or name): info for name, info in model.model_fields.items()}
    fields.update({name: info for name, info in model.model_fields.items()})
    out = {}
    for key, value in data.items():
        info = fields.get(key)
        if info is None:
            continue
        nested = _models_in(info.annotation)
        if len(nested) == 1 and isinstance(value, list):
            value = [known_fields(nested[0], v) for v in value]
        elif len(nested) == 1:
            value = known_fields(nested[0], value)
        out[key] = value
    return out
