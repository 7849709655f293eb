"""``${VAR}`` / ``${VAR:-default}`` values in env tables (Harbor `utils/env.resolve_env_vars`).

The loader keeps templates as written; the caller resolves them against the environment of
whatever plays Harbor's orchestrator host (for Shipyard, the operator).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Like Harbor, only a value that is entirely one template is resolved; text around a
# template (``"Bearer ${TOKEN}"``) leaves the value as it is.
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}", re.DOTALL)


class MissingEnvVar(ValueError):
    """Harbor's message; ``key`` is the env table's entry, ``name`` the variable it needs."""

    def __init__(self, key: str, name: str) -> None:
        super().__init__(f"Environment variable '{name}' not found in host environment")
        self.key, self.name = key, name


def resolve_env_templates(mapping: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Resolve templated values from ``environ``; a missing variable without default raises."""
    resolved = {}
    for key, value in mapping.items():
        match = _TEMPLATE.fullmatch(value)
        if match is None:
            resolved[key] = value
            continue
        name, default = match.group(1), match.group(2)
        if name in environ:
            resolved[key] = environ[name]
        elif default is not None:
            resolved[key] = default
        else:
            raise MissingEnvVar(key, name)
    return resolved
