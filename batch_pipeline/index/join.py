"""Land's on-disk join: each chunk row meets its freshly computed vector, in bounded memory.

The embeddings file is in plan order (sorted by token length, de-duplicated), the chunks file
in document order. Both are spilled into buckets by input hash and joined bucket by bucket;
the matches are spilled again by chunk row number, so the chunks file can then be streamed
once, each range of rows meeting exactly one bucket of vectors.
"""

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from batch_pipeline.stages.execute import output_schema
from batch_pipeline.state.spill import BucketSpill, bucket_count, hash_buckets
from batch_pipeline.state.staging import StagePath, parquet_file, read_batches, row_count

JOIN_BUCKET_ROWS = 16384  # vectors held at once while joining them onto chunks


def vectors_in_chunk_order(
    chunks_path: StagePath | Path, embeddings_path: StagePath | Path, dim: int, tmp: str
) -> Iterator[dict]:
    """Each chunk row, in file order, with `vector`, `embedded_at` and `resumed` (taken from
    a checkpoint) set on stale chunks.

    An on-disk hash join in bounded memory: the vectors (in plan order) and the stale chunks'
    input hashes are spilled into buckets by hash, joined bucket by bucket, and the matches
    spilled again by chunk row number, so the chunks file can then be streamed once with each
    range of rows meeting exactly one bucket of vectors. A vector that is missing (its batch
    failed) leaves `vector` as None.
    """
    schema = output_schema(dim)  # input_hash, vector, embedded_at, resumed
    marked = "resumed" in parquet_file(embeddings_path).schema_arrow.names  # older files: not
    embedded = row_count(embeddings_path)
    buckets = bucket_count(embedded, JOIN_BUCKET_ROWS)
    vectors = BucketSpill(Path(tmp), "vectors", schema)
    for batch in read_batches(embeddings_path, schema.names if marked else schema.names[:3]):
        if not marked:
            batch = batch.append_column("resumed", pa.array([False] * batch.num_rows))
        vectors.add(batch, hash_buckets(batch["input_hash"].to_pylist(), buckets))
    vectors.close()

    wanted = BucketSpill(
        Path(tmp), "wanted", pa.schema([("row", pa.int64()), ("input_hash", pa.string())])
    )
    offset = 0
    for batch in read_batches(chunks_path, ["input_hash", "stale"]):
        stale = np.flatnonzero(batch["stale"].to_numpy(zero_copy_only=False))
        hashes = batch["input_hash"].take(pa.array(stale))
        part = pa.table({"row": pa.array(stale + offset, pa.int64()), "input_hash": hashes})
        wanted.add(part, hash_buckets(hashes.to_pylist(), buckets))
        offset += batch.num_rows
    wanted.close()

    found_schema = pa.schema([pa.field("row", pa.int64()), *schema]).remove(1)  # no input_hash
    found = BucketSpill(Path(tmp), "found", found_schema)
    for bucket in wanted.buckets():
        need = wanted.read(bucket)
        have = vectors.read(bucket)
        index = {h: i for i, h in enumerate(have["input_hash"].to_pylist())}
        pairs = [
            (r, index.get(h))
            for r, h in zip(need["row"].to_pylist(), need["input_hash"].to_pylist(), strict=True)
        ]
        pairs = [(r, i) for r, i in pairs if i is not None]
        if not pairs:
            continue
        rows = np.array([r for r, _ in pairs], dtype=np.int64)
        take = pa.array([i for _, i in pairs], pa.int64())
        part = pa.table(
            {
                "row": pa.array(rows),
                "vector": have["vector"].take(take),
                "embedded_at": have["embedded_at"].take(take),
                "resumed": have["resumed"].take(take),
            }
        )
        found.add(part, rows // JOIN_BUCKET_ROWS)
    found.close()

    offset = 0
    loaded_bucket, loaded = -1, None
    for batch in read_batches(chunks_path):
        rows = batch.to_pylist()
        for i, row in enumerate(rows):
            number = offset + i
            row["vector"] = row["embedded_at"] = None
            row["resumed"] = False
            if not row["stale"]:
                continue
            bucket = number // JOIN_BUCKET_ROWS
            if bucket != loaded_bucket:
                table = found.read(bucket)
                loaded_bucket = bucket
                loaded = (
                    dict(zip(table["row"].to_pylist(), range(table.num_rows), strict=True)),
                    table["vector"].combine_chunks().flatten().to_numpy().reshape(-1, dim)
                    if table.num_rows
                    else np.zeros((0, dim), np.float32),
                    table["embedded_at"].to_pylist(),
                    table["resumed"].to_pylist(),
                )
            position = loaded[0].get(number)
            if position is not None:
                row["vector"] = loaded[1][position]
                row["embedded_at"] = loaded[2][position]
                row["resumed"] = loaded[3][position]
        offset += len(rows)
        yield from rows
