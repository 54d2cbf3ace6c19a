"""Reading the files the configuration names (the YAML file itself, a prompt, a taxonomy, an
output schema), the one way: a file nested too deeply to read or to check, or one that does
not parse, is refused in one line that says where, without quoting the file (a path that
points at the wrong file must not print its contents)."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 64  # nesting a configuration file may have: far beyond any real one


class FileFormatError(ValueError):
    """A file that does not parse, or nests too deeply; the message quotes none of it."""


def _depth_checked(value: Any) -> Any:
    """`value`, or FileFormatError when it nests deeper than `MAX_DEPTH` (walked without
    recursion, so any depth can be checked)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise FileFormatError(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return value


def _parsed(parse: Callable[[], Any], what: str) -> Any:
    try:
        return _depth_checked(parse())
    except RecursionError:
        raise FileFormatError(f"nested too deeply to read as {what}") from None


def read_yaml(text: str, loader: type = yaml.SafeLoader) -> Any:
    """The YAML document in `text` (FileFormatError saying where it is wrong)."""
    try:
        return _parsed(lambda: yaml.load(text, Loader=loader), "YAML")  # noqa: S506 - Safe
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise FileFormatError(f"not valid YAML: {problem}{where}") from None


def read_json(text: str) -> Any:
    """The JSON document in `text` (FileFormatError saying where it is wrong)."""
    try:
        return _parsed(lambda: json.loads(text), "JSON")
    except json.JSONDecodeError as error:
        raise FileFormatError(
            f"not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"
        ) from None


SAFETENSORS_HEADER_LIMIT = 100 * 1024 * 1024  # a header larger than this is not one


def weight_names(folder: Path) -> set[str] | None:
    """The tensor names a model folder's weights hold, read from the safetensors headers
    (`model.safetensors`, or the shards `model.safetensors.index.json` lists), else from
    `pytorch_model.bin` (loaded memory-mapped, weights only); None where there are no
    weights. A FileFormatError names a file that is not what it says."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        mapping = read_json(index.read_text(encoding="utf-8")).get("weight_map") or {}
        return set(mapping)
    single = folder / "model.safetensors"
    if single.is_file():
        with single.open("rb") as file:
            size = int.from_bytes(file.read(8), "little")
            if not 0 < size <= SAFETENSORS_HEADER_LIMIT:
                raise FileFormatError(f"{single.name}: not a safetensors file")
            header = read_json(file.read(size).decode("utf-8", errors="replace"))
        return {name for name in header if name != "__metadata__"}
    pickled = folder / "pytorch_model.bin"
    if pickled.is_file():
        import torch

        return set(torch.load(pickled, map_location="cpu", weights_only=True, mmap=True))
    return None
