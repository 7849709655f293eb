"""Version skew between the CRDs and the operator: Helm upgrades apply the new CRDs first, so
an operator may read objects with fields (often defaulted by the API server) that it does not
know yet. The API server already prunes fields its schema does not know, so the only unknown
fields an operator can meet are such newer ones: it drops them instead of failing the object
(the models forbid extra fields to catch mistakes in the code, not in the cluster)."""

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
