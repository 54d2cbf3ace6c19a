"""Ticket stage 2, prepare: each ticket's model input, and whether it needs a vector.

The input is the subject and body, normalised (`clean_text`) and cut at a token boundary to
`max_tokens` (special tokens included), after the model's document prefix. Its hash, with
the model fingerprint, decides staleness: a ticket needs a vector only if no generation of
this model already holds one for the same input, so a taxonomy change re-scores tickets
without a forward pass. The file has the columns plan reads (`input_hash`, `input_text`,
`token_count`, `input_ids`, `stale`), so plan and execute are the vector index's own.
"""

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from batch_pipeline.stages.columns import INPUT_IDS
from batch_pipeline.state.staging import StagePath, StageWriter, read_batches
from batch_pipeline.text.chunking import (
    SPECIAL_TOKENS,
    count_tokens,
    hash_text,
    model_token_ids,
    truncate_to_tokens,
)
from batch_pipeline.text.normalize import clean_text
from batch_pipeline.tickets.collect import OK

INPUTS_SCHEMA = pa.schema(
    [
        pa.field("ticket_id", pa.string(), nullable=False),
        pa.field("day", pa.string(), nullable=False),
        pa.field("channel", pa.string()),  # carried to land, which writes it on the row
        pa.field("input_text", pa.large_string(), nullable=False),
        pa.field("input_hash", pa.string(), nullable=False),
        pa.field("token_count", pa.int32(), nullable=False),
        INPUT_IDS,
        pa.field("stale", pa.bool_(), nullable=False),
    ]
)


def ticket_text(subject: str | None, body: str) -> str:
    """Subject and body, normalised (`clean_text`), before any cut."""
    return clean_text("\n\n".join(part for part in (subject or "", body) if part.strip()))


def ticket_input(
    tokenizer, subject: str | None, body: str, max_tokens: int, prefix: str = ""
) -> str:
    """The model input of one ticket (see the module docstring)."""
    budget = max_tokens - SPECIAL_TOKENS - count_tokens(tokenizer, prefix)
    return prefix + truncate_to_tokens(tokenizer, ticket_text(subject, body), budget)


@dataclass
class TicketPrepareSummary:
    inputs: int = 0
    needing_vectors: int = 0
    vectors_reused: int = 0
    truncated: int = 0

    def metadata(self) -> dict[str, object]:
        return {
            "inputs": self.inputs,
            "inputs_needing_vectors": self.needing_vectors,
            "vectors_reused": self.vectors_reused,
            "inputs_truncated": self.truncated,
        }


def prepare_inputs(
    collected: StagePath | Path,
    out: StagePath | Path,
    get_tokenizer: Callable[[], object],
    max_tokens: int,
    known_inputs: Callable[[], Collection[str]],
    prefix: str = "",
) -> TicketPrepareSummary:
    """Write every collected ticket's input to `out`; `known_inputs()` gives the input hashes
    that already have a vector of this model (they are not stale)."""
    started = time.perf_counter()
    summary = TicketPrepareSummary()
    tokenizer = get_tokenizer()
    known = known_inputs()
    with StageWriter(out, INPUTS_SCHEMA, started) as writer:
        columns = ["ticket_id", "day", "channel", "subject", "body", "status"]
        for batch in read_batches(collected, columns):
            table = pa.Table.from_batches([batch])
            for row in table.filter(pc.equal(table["status"], OK)).to_pylist():
                text = ticket_input(tokenizer, row["subject"], row["body"], max_tokens, prefix)
                full = ticket_text(row["subject"], row["body"])
                [ids] = model_token_ids(tokenizer, [text])
                key = hash_text(text)
                stale = key not in known
                summary.inputs += 1
                summary.needing_vectors += stale
                summary.vectors_reused += not stale
                summary.truncated += len(text) - len(prefix) < len(full)
                writer.write(
                    {
                        "ticket_id": row["ticket_id"],
                        "day": row["day"],
                        "channel": row["channel"],
                        "input_text": text,
                        "input_hash": key,
                        "token_count": min(len(ids), max_tokens),
                        "input_ids": ids,
                        "stale": stale,
                    }
                )
    return summary
