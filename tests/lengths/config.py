"""The lengths product's section of `products:`."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class LengthsConfig(BaseModel):
    """`products: lengths:` (beside its `declaration`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    collections: list[str] = Field(min_length=1, description="The collections it buckets.")
    buckets: list[int] = Field(
        min_length=1, description="Upper bounds in bytes, ascending; larger is the last bucket."
    )
    labelled: Path | None = Field(
        default=None, description="JSONL of {doc_id, bucket}: the scorer's labelled set."
    )
    tolerance: float = Field(default=0.0, ge=0, le=1, description="Accuracy below live allowed.")

    @field_validator("buckets")
    @classmethod
    def _ascending(cls, value: list[int]) -> list[int]:
        if any(b <= 0 for b in value) or value != sorted(set(value)):
            raise ValueError("bounds must be positive and strictly ascending")
        return value

    @field_validator("labelled")
    @classmethod
    def _relative(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base_dir")
        if value is not None and base is not None and not value.is_absolute():
            value = Path(base) / value
        return value
