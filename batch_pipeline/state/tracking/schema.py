"""The tracking database's tables, and how to connect to it (SQLite or any SQLAlchemy URL).

Most tables are keyed by a *generation* (`<collection>__<fingerprint>`). Their key column is
named `collection` in the database, as older versions created it; in Python it is addressed
as `generation` (`documents.c.generation`), so the code says what it holds.
"""

import sqlite3
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Engine

metadata = sa.MetaData()


def _generation_key() -> sa.Column:
    return sa.Column("collection", sa.String(128), key="generation", primary_key=True)


documents = sa.Table(
    "documents",
    metadata,
    _generation_key(),
    sa.Column("doc_id", sa.String(2048), primary_key=True),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("source_version", sa.String(256), nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("chunk_count", sa.Integer, nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("landed_at", sa.Float, nullable=False),
    sa.Column("source_changed_at", sa.Float),
    sa.Column("chunk_digest", sa.String(64)),
)

# Source changes seen (by the publish sensor or a collect) and not yet landed.
pending = sa.Table(
    "pending_changes",
    metadata,
    _generation_key(),
    sa.Column("doc_id", sa.String(2048), primary_key=True),
    sa.Column("changed_at", sa.Float, nullable=False),
    sa.Column("detected_at", sa.Float, nullable=False),
)

failures = sa.Table(
    "failures",
    metadata,
    _generation_key(),
    sa.Column("doc_id", sa.String(2048), primary_key=True),
    sa.Column("stage", sa.String(32), nullable=False),
    sa.Column("reason", sa.String(64), nullable=False),
    sa.Column("error_class", sa.String(128), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("content_hash", sa.String(64)),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("failed_at", sa.Float, nullable=False),
    sa.Column("source_version", sa.String(256)),
)

# One row per run and generation it landed into. What the run counted is `counts` (JSON, in
# its product's own nouns: documents and chunks, tickets, ...) in the `unit` its measures
# name. The docs_*/chunks_* columns are kept for databases and readers of older versions: a
# documents-unit run fills them from its counts, any other writes 0 there, and nothing reads
# them for a run that has `counts`. Measure columns whose old names said "docs" are addressed
# by neutral keys (`runs.c.attempted` is the column docs_attempted).
runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    _generation_key(),
    sa.Column("finished_at", sa.Float, nullable=False),
    sa.Column("model_name", sa.Text, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("docs_landed", sa.Integer, nullable=False),
    sa.Column("docs_deleted", sa.Integer, nullable=False),
    sa.Column("docs_failed", sa.Integer, key="failed", nullable=False),
    sa.Column("chunks_embedded", sa.Integer, nullable=False),
    sa.Column("chunks_reused", sa.Integer, nullable=False),
    sa.Column("chunks_removed", sa.Integer, nullable=False),
    sa.Column("table_version", sa.Integer),
    sa.Column("table_version_before", sa.Integer),
    sa.Column("chunks_resumed", sa.Integer),  # vectors taken from checkpoints, not embedded
    sa.Column("chunks_superseded", sa.Integer),  # not written: another run landed newer first
    # "landing" from before a run's first commit until it finishes; "landed" (or NULL, from
    # older versions) after. So a run that crashed after committing rows is still known.
    sa.Column("state", sa.String(16)),
    # The run's measures (`batch_pipeline.measures.run.RunMeasures`); NULL for older runs.
    sa.Column("partition", sa.String(128)),
    sa.Column("trigger", sa.String(16)),  # sensor, schedule, backfill or manual
    sa.Column("started_at", sa.Float),
    sa.Column("inputs", sa.Integer),  # model inputs computed by this run
    sa.Column("tokens", sa.Integer),
    sa.Column("execute_seconds", sa.Float),  # embedding the inputs: the marginal time
    sa.Column("fixed_seconds", sa.Float),  # model load, calibration, warm-up: once per run
    sa.Column("device", sa.String(32)),
    sa.Column("devices", sa.Integer),  # devices execute held (GPUs: tensor x data parallel)
    sa.Column("dtype", sa.String(16)),
    sa.Column("backend", sa.String(16)),  # what ran the model: torch, openvino
    sa.Column("calibration", sa.Text),  # JSON: how execute chose its backend and dtype
    sa.Column("fidelity_min_cosine", sa.Float),
    sa.Column("device_price_hour", sa.Float),
    sa.Column("host_price_hour", sa.Float),
    sa.Column("currency", sa.String(16)),
    sa.Column("window_seconds", sa.Float),
    sa.Column("docs_attempted", sa.Integer, key="attempted"),  # in the run's unit
    sa.Column("retries", sa.Integer),
    sa.Column("inputs_resumed", sa.Integer),
    sa.Column("oom_splits", sa.Integer),
    sa.Column("docs_quarantined", sa.Integer, key="quarantined"),  # in the run's unit
    sa.Column("completeness", sa.Float),
    sa.Column("partition_inputs", sa.Integer),  # model inputs a full rebuild would compute
    sa.Column("deletions_held", sa.Integer),  # beyond the mass-deletion limits, not landed
    sa.Column("stage_seconds", sa.Text),  # JSON: each stage's wall-clock seconds
    sa.Column("unit", sa.String(16)),  # documents, tickets, ...: what the run's inputs are
    sa.Column("counts", sa.Text),  # JSON: the product's own counts, by name
    sa.Column("executor", sa.String(32)),  # what ran a chat model's plan
    sa.Column("token_cost", sa.Float),  # a provider's charge for the run's tokens
    # the run that submitted the provider batches this one collected (its record merged here)
    sa.Column("submitted_by", sa.String(64)),
)

# One row per product and fingerprint: building, candidate, live, retired, dropped. The
# `collection` column holds the product's name (a collection's, or the ticket product's): in
# Python it is the `product` key.
generations = sa.Table(
    "generations",
    metadata,
    sa.Column("collection", sa.String(128), key="product", primary_key=True),
    sa.Column("fingerprint", sa.String(64), primary_key=True),
    sa.Column("index_name", sa.String(256), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("model_config", sa.Text, nullable=False),
    sa.Column("full_pass", sa.Boolean, nullable=False),
    sa.Column("full_passes", sa.Text),  # JSON: partitions (shards) that had a full pass
    sa.Column("documents", sa.Integer, nullable=False),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("complete", sa.Boolean, nullable=False),
    sa.Column("scores", sa.Text),
    sa.Column("decision", sa.Text),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("promoted_at", sa.Float),
    sa.Column("retired_at", sa.Float),
    # the table versions (its own and live's) and completeness its last review saw
    sa.Column("reviewed_key", sa.Text),
)

# Every promotion, rollback, drop, invalidation and restore, by product (the `product` key).
audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("collection", sa.String(128), key="product", nullable=False),
    sa.Column("from_index", sa.String(256)),
    sa.Column("to_index", sa.String(256)),
    sa.Column("details", sa.Text),
)

# One row per lease held: a generation's landing lease (key: the generation) while a run lands
# into it, or a partition's run lease (key: "partition:<key>") while a run goes through its
# stages. A lease, so a killed holder expires.
leases = sa.Table(
    "collection_locks",
    metadata,
    sa.Column("collection", sa.String(128), key="name", primary_key=True),
    sa.Column("owner", sa.String(128), nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Column("host", sa.String(255)),
    sa.Column("pid", sa.Integer),
)


# One row per batch handed to a provider's Batch API (the `openai-batch` executor), from its
# submission until its results are in the partition's checkpoints: a rerun while one is in
# flight submits nothing and collects it instead.
provider_batches = sa.Table(
    "provider_batches",
    metadata,
    sa.Column("batch_id", sa.String(128), primary_key=True),
    _generation_key(),
    sa.Column("partition", sa.String(128), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),  # the run that submitted it
    sa.Column("input_file_id", sa.String(128), nullable=False),
    sa.Column("requests", sa.Integer, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),  # 1, or 2 for a resubmission
    sa.Column("status", sa.String(16), nullable=False),  # the provider's last status
    sa.Column("submitted_at", sa.Float, nullable=False),
    sa.Column("collected_at", sa.Float),  # when its results reached the checkpoints
    sa.Column("collected_by", sa.String(64)),  # the run that collected them
    # the batch file's SHA-256: its metadata at the provider, so a batch whose creation
    # answered an error (or was cut off) is found there and adopted, not created twice
    sa.Column("file_sha256", sa.String(64)),
    # why a batch ended without all its answers: given up (the provider no longer has it),
    # dropped by an operator, cancelled at the provider, lines that were not answers
    sa.Column("note", sa.String(512)),
    # the Batch API it was sent to, as it may be printed (credentials masked): a batch the
    # provider at another `api_base` does not know may still run, and bill, at this one
    sa.Column("api_base", sa.String(512)),
    # the API it was sent through (a provider client's `wire`: "openai", "anthropic"); None
    # for a batch recorded before batches said so, which went through the OpenAI Batch API
    sa.Column("wire", sa.String(32)),
)

# The custom_ids of each batch file a run handed to a provider, by the file's SHA-256,
# written before the batch is created: a finished batch's requests are known without
# reading the provider's copy of its input file (which may be gone).
provider_batch_requests = sa.Table(
    "provider_batch_requests",
    metadata,
    sa.Column("file_sha256", sa.String(64), primary_key=True),
    sa.Column("custom_id", sa.String(256), primary_key=True),
    # its line in the file (from 1), which a provider's validation errors name; None for a
    # batch recorded before lines were
    sa.Column("line", sa.Integer),
)


# A chat model's answers to a question it is asked again and again (the ticket cascade's: one
# text, under one model, prompt and list of intents), by the question's hash and the text's:
# whoever asks the same question of the same text again takes the answer, at no cost.
chat_answers = sa.Table(
    "chat_answers",
    metadata,
    sa.Column("question", sa.String(64), primary_key=True),
    sa.Column("text_key", sa.String(64), primary_key=True),
    sa.Column("answer", sa.String(256), nullable=False),
    sa.Column("answered_at", sa.Float, nullable=False),
)

# One row per index a land built (or rebuilt) on a table: how many rows it was trained on,
# so a later land knows when the table has outgrown the training (`index.vector.rebuild_growth`).
index_builds = sa.Table(
    "index_builds",
    metadata,
    sa.Column("table_name", sa.String(256), primary_key=True),
    sa.Column("index_name", sa.String(128), primary_key=True),
    sa.Column("rows", sa.Integer, nullable=False),  # the table's rows when it was built
    sa.Column("built_at", sa.Float, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
)


def connect(url: str) -> Engine:
    """An engine for the tracking URL; SQLite gets a busy timeout and WAL mode."""
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    engine = sa.create_engine(url, connect_args={"timeout": 60})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(conn, _record) -> None:  # noqa: ANN001
        cursor = conn.cursor()
        cursor.execute("PRAGMA busy_timeout=60000")
        # Switching to WAL answers "database is locked" at once, without waiting, while
        # another process writes; the mode persists in the file, so only switch once.
        for attempt in range(100):
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                break
            try:
                cursor.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or attempt == 99:
                    raise
                time.sleep(0.1)
        cursor.close()

    return engine


def create_schema(engine: Engine) -> None:
    """Create missing tables and columns; safe when several processes start at once."""
    for attempt in range(10):
        try:
            metadata.create_all(engine)
            _add_missing_columns(engine)
            return
        except sa.exc.DBAPIError as error:  # another process created it first
            text = str(error).lower()
            racing = "already exists" in text or "duplicate" in text
            if not racing or attempt == 9:
                raise
            time.sleep(0.1 * (attempt + 1))


def _add_missing_columns(engine: Engine) -> None:
    """Forward-only migration: add nullable columns that newer versions introduced."""
    inspector = sa.inspect(engine)
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            present = {c["name"] for c in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name not in present and column.nullable:
                    kind = column.type.compile(dialect=engine.dialect)
                    conn.execute(
                        sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}')
                    )


def write_racing_inserts(engine: Engine, write: Callable[[sa.Connection], None]) -> None:
    """Run `write` in one transaction; rerun it if a concurrent run inserted a key first.

    Two runs of one partition collect at once and record the same documents. Whichever
    commits second meets a unique-key conflict; its rerun sees the winner's rows and
    merges into them. Plain SQL, so it holds on SQLite, PostgreSQL and any other database.
    """
    for attempt in range(20):
        try:
            with engine.begin() as conn:
                write(conn)
            return
        except sa.exc.IntegrityError:
            if attempt == 19:
                raise
            time.sleep(0.05 * (attempt + 1))
