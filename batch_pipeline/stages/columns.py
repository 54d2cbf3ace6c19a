"""What each column of the stage files and of a generation's table holds: one description per
column name (a name means the same in every file), shown in the Dagster UI's column schema;
and the one column several stage files share by type, the model input's token ids."""

import pyarrow as pa

# Prepare tokenises each model input to count it; it keeps the ids, plan carries them, and
# execute pads them instead of tokenising the input again (a file from before this column
# fails to read with a StageFileError that says to start a new run, as any such file does)
INPUT_IDS = pa.field("input_ids", pa.list_(pa.int32()), nullable=False)

COLUMN_DESCRIPTIONS: dict[str, str] = {
    # identity and lineage
    "collection": "The configured collection the row belongs to.",
    "partition": "The Dagster partition (the collection, or its shard) that landed the row.",
    "doc_id": "The document's id at its source: path, object key or id column.",
    "chunk_id": "Stable id: the doc id, the section's heading path and the position in it.",
    "chunk_index": "The chunk's position within its document.",
    "run_id": "The run that computed the row's vector.",
    "embedded_at": "When the vector was computed (UTC).",
    "model_name": "The embedding model that computed the vector.",
    "model_fingerprint": "Hash of everything that changes a vector: model files and settings.",
    "source_version": "The source's version of the document: mtime+size, ETag or updated-at.",
    "content_hash": "SHA-256 of the document's bytes.",
    "source_changed_at": "When the source says the document last changed (epoch seconds).",
    # collect
    "status": "new, changed, unchanged, deleted, failed or quarantined.",
    "title": "The document's title.",
    "format": "The document's markup: markdown, rst, html or text.",
    "size": "The document's size in bytes, where the source says.",
    "error_reason": "Why the document failed: a short label (empty, binary, too_large, ...).",
    "error_message": "Why the document failed, in words.",
    # prepare, plan, execute
    "section": "The chunk's heading path within the document.",
    "text": "The chunk's text.",
    "input_text": "The exact model input: document prefix, title, heading path and text.",
    "input_hash": "SHA-256 of the exact model input: with the fingerprint, the staleness key.",
    "token_count": "Tokens of the model input, special tokens included.",
    "input_ids": "The model input's token ids (special tokens included), which execute pads "
    "instead of tokenising again.",
    "stale": "Whether the chunk needs a new vector (its staleness key changed).",
    "batch_index": "The batch the input is planned in.",
    "vector": "The embedding.",
    "resumed": "Whether the vector came from an interrupted run's checkpoint.",
    # metadata
    "source_metadata": "The source's metadata of the document (S3 object metadata, SQL "
    "metadata_columns), as JSON.",
    "metadata": "The document's metadata not declared under metadata.fields, as JSON "
    "(declared fields have typed columns of their own).",
}
