"""The document briefs' section of a collection (`collections[].briefs`): the prompt file,
the output schema, sampling, and the gate's settings."""

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from batch_pipeline.config.base import (
    _existing_file,
    _Strict,
)
from batch_pipeline.config.output_schema import OutputSchemaError, load_output_schema
from batch_pipeline.config.prompt import PromptError, load_prompt

# Columns every brief row has: a schema's properties may not take these names.
BRIEF_COLUMNS = frozenset(
    {
        "collection",
        "partition",
        "doc_id",
        "title",
        "content_hash",
        "input_hash",
        "raw_output",
        "finish_reason",
        "prompt_tokens",
        "output_tokens",
        "truncated",
        "prompt_version",
        "schema_version",
        "model_name",
        "model_fingerprint",
        "run_id",
        "generated_at",
    }
)
BRIEF_PLACEHOLDERS = ("title", "text", "doc_id")  # what a brief prompt's document part may use
QUESTIONS_FIELD = "questions"  # the brief field `index_questions` embeds


class BriefsEvaluationConfig(_Strict):
    """The labelled set a new brief generation is scored on, against live."""

    path: Path = Field(
        description="JSONL of {doc_id, audience}: the right audience of some of the "
        "collection's documents; relative to the config."
    )
    tolerance: float = Field(
        default=0.02,
        ge=0,
        description="How much lower than live a candidate's audience accuracy and "
        "faithfulness (summaries nearer their own document than any other) may be.",
    )

    _resolve_path = field_validator("path")(_existing_file)


class BriefsConfig(_Strict):
    """Document briefs: a chat model over every document of the collection, its output
    constrained to a JSON schema, one LanceDB table per generation."""

    prompt: Path = Field(
        description="YAML prompt file with `system` (shared) and `document` ($title, $text, "
        "$doc_id); relative to the config. Its hash is the prompt version."
    )
    output_schema: Path = Field(
        description="JSON schema of one brief (an object; each property a typed column); "
        "relative to the config."
    )
    document_tokens: int = Field(
        default=768,
        ge=16,
        description="A document is cut at this many tokens (the model's tokenizer) before it "
        "goes into the prompt; its row says when it was.",
    )
    max_tokens: int = Field(default=512, ge=1, description="Most output tokens per brief.")
    repetition_penalty: float = Field(
        default=1.0,
        gt=0,
        description="Above 1 discourages a token already generated (greedy decoding stays "
        "deterministic); small models loop without it.",
    )
    min_valid_share: float = Field(
        default=0.99,
        gt=0,
        le=1,
        description="Least share of a generation's outputs that must be valid for it to go live.",
    )
    evaluation: BriefsEvaluationConfig | None = None
    index_questions: bool = Field(
        default=False,
        description="Embed each live brief's questions (the output schema's `questions`, an "
        "array of strings) as retrieval rows beside the collection's vector index, tied to "
        "their document; search and the retrieval measures read them with the chunks.",
    )

    _resolve_prompt = field_validator("prompt")(_existing_file)
    _resolve_schema = field_validator("output_schema")(_existing_file)

    @model_validator(mode="after")
    def _readable_files(self) -> "BriefsConfig":
        try:
            load_prompt(self.prompt, BRIEF_PLACEHOLDERS)
        except PromptError as error:
            raise ValueError(f"prompt: {error}") from None
        try:
            output = load_output_schema(self.output_schema, BRIEF_COLUMNS)
        except OutputSchemaError as error:
            raise ValueError(f"output_schema: {error}") from None
        if self.index_questions and output.columns.get(QUESTIONS_FIELD) != "list<string>":
            raise ValueError(
                f"index_questions: the output schema needs a {QUESTIONS_FIELD!r} property, "
                f"an array of strings (it has {sorted(output.columns)})"
            )
        return self
