"""A prompt template: a YAML file with a system part, shared by every input, and an input
part with `$placeholders`.

```yaml
system: |
  You write a brief of a help-centre article for a support agent.
document: |
  Title: $title

  $text
```

Placeholders are `string.Template`'s (`$name` or `${name}`; `$$` is a dollar sign), so a JSON
example in the prompt needs no escaping. Which names a template may use is the caller's
(`allowed`); any other name fails at load. The version is a hash of the file's bytes: any edit
is a new version.
"""

import hashlib
import re
import string
from dataclasses import dataclass
from pathlib import Path

from batch_pipeline.config.files import FileFormatError, read_yaml

MAX_PROMPT_BYTES = 256 * 1024


class PromptError(ValueError):
    """A prompt file that cannot be used; the message names the part and the problem."""


@dataclass(frozen=True)
class PromptTemplate:
    path: Path
    system: str
    document: string.Template
    version: str  # a hash of the file's bytes

    def render(self, **values: str) -> str:
        """The input part with its placeholders filled."""
        return self.document.substitute(values)


KEY_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,40}")


def load_prompt(path: Path, allowed: tuple[str, ...]) -> PromptTemplate:
    """Read and check a prompt file; a `PromptError` names what is wrong."""
    data = path.read_bytes()
    if len(data) > MAX_PROMPT_BYTES:
        raise PromptError(
            f"{path.name} is {len(data):,} bytes; a prompt holds {MAX_PROMPT_BYTES:,}"
        )
    try:
        parsed = read_yaml(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise PromptError(f"{path.name} is not UTF-8 YAML: not UTF-8 text") from None
    except FileFormatError as error:
        raise PromptError(f"{path.name} is not UTF-8 YAML: {error}") from None
    if not isinstance(parsed, dict):
        raise PromptError(f"{path.name} must be a mapping with `system` and `document`")
    unknown = sorted(set(parsed) - {"system", "document"}, key=str)
    if unknown:  # named only when it looks like a key: another file's line is not printed
        key = unknown[0]
        named = (
            f"unknown key {key!r}"
            if isinstance(key, str) and KEY_LIKE.fullmatch(key)
            else "keys that are no prompt's (is it a prompt file?)"
        )
        raise PromptError(f"{path.name}: {named}; use system and document")
    for part in ("system", "document"):
        if not isinstance(parsed.get(part), str) or not parsed[part].strip():
            raise PromptError(f"{path.name}: `{part}` must be a non-empty text")
    document = string.Template(parsed["document"])
    if not document.is_valid():
        raise PromptError(
            f"{path.name}: `document` has a `$` that starts no placeholder; "
            "write $$ for a dollar sign"
        )
    names = set(document.get_identifiers())
    stray = sorted(names - set(allowed))
    if stray:
        raise PromptError(
            f"{path.name}: `document` uses ${stray[0]}, which is not known; "
            f"use {', '.join('$' + a for a in allowed)}"
        )
    if "$" in parsed["system"].replace("$$", ""):
        raise PromptError(
            f"{path.name}: `system` is shared by every input and takes no "
            "placeholders; write $$ for a dollar sign"
        )
    return PromptTemplate(
        path=path,
        system=parsed["system"].replace("$$", "$").strip(),
        document=document,
        version=hashlib.sha256(data).hexdigest()[:16],
    )
