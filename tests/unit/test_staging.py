"""Stage files on a local folder and on S3 (moto's server over HTTP): the same behaviour."""

import time
import uuid

import boto3
import pyarrow as pa
import pytest

from batch_pipeline.state.staging import (
    StageFileError,
    StageWriter,
    StagingArea,
    parquet_file,
    read_batches,
    read_table,
)


@pytest.fixture(params=["local", "s3"])
def area(request, tmp_path) -> StagingArea:
    if request.param == "local":
        return StagingArea(str(tmp_path / "staging"))
    endpoint = request.getfixturevalue("moto_server")
    bucket = f"bp-staging-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    options = {"aws_endpoint": endpoint, "aws_region": "us-east-1", "allow_http": "true"}
    return StagingArea(f"s3://{bucket}/staging", options)


def test_a_stage_file_appears_only_when_complete(area):
    path = area.stage_file("handbook", "run-1", "chunks")
    schema = pa.schema([("n", pa.int64())])
    with pytest.raises(RuntimeError, match="boom"), StageWriter(path, schema) as writer:
        writer.write({"n": 1})
        writer.flush()
        raise RuntimeError("boom")
    assert not path.is_file()
    assert [f.base_name for f in (area.root / "handbook").files(recursive=True)] == []
    with StageWriter(path, schema) as writer:
        for n in range(1500):
            writer.write({"n": n})
    assert path.is_file()
    assert read_table(path)["n"].to_pylist() == list(range(1500))
    assert sum(b.num_rows for b in read_batches(path, batch_rows=100)) == 1500
    assert [f.base_name for f in (area.root / "handbook").files(recursive=True)] == [
        "chunks.parquet"
    ]


def test_locate_finds_a_recorded_uri_and_refuses_others(area):
    path = area.stage_file("handbook", "run-1", "plan")
    path.write_table(pa.table({"n": [1]}))
    assert area.locate(path.uri).is_file()
    with pytest.raises(ValueError, match="is not under the staging location"):
        area.locate("/somewhere/else/plan.parquet")


def test_pruning_keeps_the_newest_runs_and_the_ones_asked_for(area):
    for run in ("run-1", "run-2", "run-3", "run-4"):
        area.stage_file("handbook", run, "collected").write_table(pa.table({"n": [1]}))
        time.sleep(1.1)  # S3 modification times have one-second resolution
    checkpoint = area.checkpoint_dir("handbook", "fp") / "part-1.parquet"
    checkpoint.write_table(pa.table({"n": [1]}))
    removed = area.prune_runs("handbook", {"run-1", "checkpoints"}, keep_latest=2)
    runs = {
        f.path.split("/handbook/", 1)[1].split("/")[0]
        for f in (area.root / "handbook").files(recursive=True)
    }
    assert removed == 2  # run-2 and run-3
    assert runs == {"run-1", "run-4", "checkpoints"}


def test_pruning_keeps_runs_that_did_not_finish_until_their_grace_ends(area):
    for run in ("run-1", "run-2", "run-3"):
        area.stage_file("handbook", run, "collected").write_table(pa.table({"n": [1]}))
        time.sleep(1.1)

    def runs() -> set[str]:
        files = (area.root / "handbook").files(recursive=True)
        return {f.path.split("/handbook/", 1)[1].split("/")[0] for f in files}

    # run-2 did not land: still executing, or failed and waiting to be re-executed
    removed = area.prune_runs(
        "handbook",
        {"run-3"},
        1,
        finished=lambda run: run == "run-1",
        unfinished_grace_seconds=3600,
    )
    assert removed == 1
    assert runs() == {"run-2", "run-3"}
    removed = area.prune_runs(
        "handbook", {"run-3"}, 1, finished=lambda run: False, unfinished_grace_seconds=0
    )
    assert removed == 1
    assert runs() == {"run-3"}


def test_big_writes_are_cut_into_row_groups_and_read_back_in_bounded_batches(area):
    path = area.stage_file("handbook", "run-1", "embeddings")
    with StageWriter(path, pa.schema([("n", pa.int64())])) as writer:
        writer.write_table(pa.table({"n": list(range(40_000))}))
        for n in range(40_000, 40_700):
            writer.write({"n": n})
    groups = parquet_file(path).metadata
    assert max(groups.row_group(i).num_rows for i in range(groups.num_row_groups)) <= 16384
    batches = list(read_batches(path, batch_rows=1000))
    assert max(b.num_rows for b in batches) <= 1000
    assert [n for b in batches for n in b["n"].to_pylist()] == list(range(40_700))


def test_stage_files_dictionary_encode_all_but_vectors(area):
    """Vectors never repeat: trying a dictionary on them only slows the write."""
    from batch_pipeline.stages.columns import INPUT_IDS

    schema = pa.schema(
        [
            ("input_hash", pa.string()),
            ("token_count", pa.int32()),
            INPUT_IDS,
            ("vector", pa.list_(pa.float32(), 3)),
            ("scores", pa.list_(pa.float64())),
        ]
    )
    rows = [
        {
            "input_hash": f"h{i % 5}",
            "token_count": 4,
            "input_ids": [101, i % 7, 102],
            "vector": [i * 0.5, 1.0, -i / 3],
            "scores": [0.25, i / 7],
        }
        for i in range(300)
    ]
    table = pa.Table.from_pylist(rows, schema=schema)
    path = area.stage_file("handbook", "run-1", "embeddings")
    with StageWriter(path, schema) as writer:
        writer.write_table(table)
    group = parquet_file(path).metadata.row_group(0)
    dictionary = {
        group.column(i).path_in_schema: "RLE_DICTIONARY" in group.column(i).encodings
        for i in range(group.num_columns)
    }
    assert dictionary == {
        "input_hash": True,
        "token_count": True,
        "input_ids.list.element": True,
        "vector.list.element": False,
        "scores.list.element": False,
    }
    assert read_table(path).equals(table)


def test_a_stage_file_without_a_column_a_reader_needs_says_what_to_do(area):
    """A stage file from before an upgrade (handed over by a re-execution from failure) lacks
    a column the new reader asks for: the error says so and what to run, and reading the
    columns it has still works."""
    path = area.stage_file("handbook", "run-1", "collected")
    with StageWriter(path, pa.schema([("doc_id", pa.string())])) as writer:
        writer.write({"doc_id": "a.md"})
    assert read_table(path, ["doc_id"])["doc_id"].to_pylist() == ["a.md"]
    for read in (read_table, lambda p, c: list(read_batches(p, c))):
        with pytest.raises(StageFileError, match="has no column 'source_metadata': an earlier"):
            read(path, ["doc_id", "source_metadata"])
