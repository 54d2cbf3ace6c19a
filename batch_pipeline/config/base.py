"""What every configuration section shares: its error, the strict model every section is
built on (an unknown key fails at load, naming the field), and the path validators."""

from pathlib import Path
from typing import get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the field and the reason."""


def _takes(annotation: object, kind: type) -> bool:
    """Whether a field's annotation admits `kind` (directly, or in a union or Annotated)."""
    if annotation is kind:
        return True
    return any(_takes(arg, kind) for arg in get_args(annotation))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, data: object) -> object:
        """`k: true` is no number: pydantic's lax mode would read it as 1 (a whole number,
        or a float), so a boolean is refused wherever a field does not take one."""
        if not isinstance(data, dict):
            return data
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if not isinstance(value, bool) or field is None or _takes(field.annotation, bool):
                continue
            if _takes(field.annotation, int) or _takes(field.annotation, float):
                raise ValueError(f"{name}: {str(value).lower()} is a boolean; give a number")
        return data


def _relative_to_config(value: Path | None, info: ValidationInfo) -> Path | None:
    """Relative paths in the file resolve against the config file's folder."""
    if value is None:
        return None
    base = (info.context or {}).get("base_dir")
    if base is not None and not value.is_absolute():
        value = Path(base) / value
    return value.resolve()


RELATIVE_PATHS = "relative paths resolve against the config file's folder"


def _existing_folder(value: Path | None, info: ValidationInfo) -> Path | None:
    """A folder that must exist when the configuration loads."""
    value = _relative_to_config(value, info)
    if value is not None and not value.is_dir():
        problem = "not a folder" if value.exists() else "folder not found"
        raise ValueError(f"{problem}: {value} ({RELATIVE_PATHS})")
    return value


def _existing_file(value: Path | None, info: ValidationInfo) -> Path | None:
    """A file that must exist when the configuration loads."""
    value = _relative_to_config(value, info)
    if value is not None and not value.is_file():
        problem = "not a file" if value.exists() else "file not found"
        raise ValueError(f"{problem}: {value} ({RELATIVE_PATHS})")
    return value


def valid_timezone(value: str) -> str:
    """An IANA time zone name, or a ValueError naming it."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r}") from None
    return value


def window_seconds(completion_window: str) -> float:
    """A completion window ("24h", "30m", "2d") in seconds; a ConfigError naming it otherwise."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = completion_window[:-1], completion_window[-1:]
    if unit not in units or not number.isdigit() or int(number) <= 0:
        raise ConfigError(
            f"completion_window {completion_window!r}: give a number and a unit "
            "(s, m, h or d), as 24h"
        )
    return float(int(number) * units[unit])
