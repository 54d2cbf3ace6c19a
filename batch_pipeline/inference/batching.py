"""Batching: pack model inputs into batches under a padded-token budget.

Inputs sorted by token length are packed greedily: a batch grows while
`batch_size x longest_input <= token_budget` and `batch_size <= max_batch_size`. Sorting makes
the longest input of a batch its last, so padding stays small, and long inputs end up in small
batches of their own. On CUDA the budget is derived from free device memory and the model's
shape (`budget_from_memory`); on CPU it is a setting.

Plain Python (no pyarrow), so the GPU check can import it on a bare machine.
"""

from dataclasses import dataclass

from batch_pipeline.inference.models import ResolvedModel

DEFAULT_TOKEN_BUDGET = 4096
DEFAULT_MAX_BATCH_SIZE = 128


@dataclass(frozen=True)
class PlanSettings:
    token_budget: int = DEFAULT_TOKEN_BUDGET
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE

    def __post_init__(self) -> None:
        if self.token_budget < 1 or self.max_batch_size < 1:
            raise ValueError("token_budget and max_batch_size must be positive")


def activation_bytes(batch_size: int, seq_len: int, model: ResolvedModel, dtype_bytes: int) -> int:
    """Estimated peak activation memory of one forward pass of a batch, in bytes.

    Per layer the live tensors are the hidden states and their projections (about
    4 x hidden + intermediate values per token) and, per head, the attention scores and
    probabilities, which grow with the square of the sequence length.
    """
    per_token = 4 * model.hidden_size + model.intermediate_size
    attention = 2 * model.num_heads * seq_len * seq_len
    return dtype_bytes * batch_size * (seq_len * per_token + attention)


def budget_from_memory(
    free_bytes: int, model: ResolvedModel, dtype_bytes: int, fraction: float = 0.5
) -> int:
    """The padded-token budget that keeps a worst-case batch within `fraction` of free memory."""
    seq = model.max_seq_length
    per_padded_token = activation_bytes(1, seq, model, dtype_bytes) / seq
    return max(seq, int(free_bytes * fraction / per_padded_token))


@dataclass
class Batch:
    indices: list[int]
    max_tokens: int

    @property
    def padded_tokens(self) -> int:
        return len(self.indices) * self.max_tokens


def pack_batches(token_counts: list[int], settings: PlanSettings) -> list[Batch]:
    """Greedy packing of inputs sorted by length; returns batches of indices into the input."""
    order = sorted(range(len(token_counts)), key=lambda i: token_counts[i])
    batches: list[Batch] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = max(1, token_counts[i])
        if current and (
            (len(current) + 1) * max(longest, length) > settings.token_budget
            or len(current) >= settings.max_batch_size
        ):
            batches.append(Batch(current, longest))
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(Batch(current, longest))
    return batches
