"""Which of a briefs generation's failures are final, and what the next run does about the
documents without a brief: a document whose outputs were invalid under its key as often as it
may be tried (`BriefProduct.invalid_output_tries`) waits for a new key (its content, the
prompt, the schema or the model); any other failure (an engine's, a provider's, a refusal
for an engine setting) and a document with no failure recorded are tried by the next run."""

from collections.abc import Mapping


def final_failures(failures: Mapping[str, dict], tries: int) -> dict[str, str]:
    """doc_id -> the content hash it failed under, for the failures that are final."""
    return {
        doc_id: failure["content_hash"]
        for doc_id, failure in failures.items()
        if failure.get("content_hash") and failure["attempts"] >= tries
    }


def next_run_note(failures: Mapping[str, dict], tries: int, missing: int) -> str:
    """What happens to `missing` documents without a brief, given the failures recorded: how
    many the next run tries again and how many wait for a new key; said only where true."""
    final = len(final_failures(failures, tries))
    again = max(0, missing - final)
    parts = []
    if again:
        parts.append(f"the next run tries {again} again")
    if final:
        tried = "once" if tries == 1 else f"{tries} times"
        parts.append(
            f"{final} failed as often as they may (invalid outputs, tried {tried}) and wait "
            "for a change to the document, the prompt, the schema or the model"
        )
    said = "`batch-pipeline failures` says why" if failures else "no failure is recorded"
    return "; ".join([said, *parts])
