"""The project's vocabulary, in one place: collection, partition, generation and product.

- A *collection* is configured (`collections[].name` in the YAML).
- A *partition* is a Dagster partition key: a collection, or one shard of it (`<name>-s03`),
  or a day of the ticket intents (`2026-11-29`).
- A *product* owns generations: a collection's vector index (named after the collection),
  its document briefs (`<collection>_briefs`), its related documents
  (`<collection>_related`), its reranker (`<collection>_reranker`: a generation of it is a
  reranker reviewed over one index generation) and the ticket intents
  (`tickets.name`) are products. A product's *kind* is index, briefs, related or tickets.
- A *generation* is one table of a product, for one fingerprint: its LanceDB table and
  tracking key, `<product>__<fingerprint>`. A generation may have companion tables that
  another product writes beside it (a declared feed): a vector index generation's briefs'
  questions, `<product>_questions__<fingerprint>`.
- A *model family* says what a model returns: `embed` (vectors), `generate` (text) or
  `score` (a number per query and document); an *executor* runs a family's plan, chosen by
  name from the family's registry (`batch_pipeline.executors.registry`).

Code that has one of these names and needs another asks this module; nothing else splits
or formats these strings.
"""

import hashlib

EMBED, GENERATE, SCORE = "embed", "generate", "score"  # the model families
GENERATION_SEPARATOR = "__"
SHARD_MARK = "-s"
QUESTIONS_SUFFIX = "_questions"
BRIEFS_SUFFIX = "_briefs"
RERANKER_SUFFIX = "_reranker"
RELATED_SUFFIX = "_related"


def briefs_product_name(collection: str) -> str:
    """The document briefs product of a collection (`handbook` -> `handbook_briefs`)."""
    return f"{collection}{BRIEFS_SUFFIX}"


def related_product_name(collection: str) -> str:
    """The related documents of a collection (`handbook` -> `handbook_related`)."""
    return f"{collection}{RELATED_SUFFIX}"


def reranker_product_name(collection: str) -> str:
    """The reranker of a collection, whose generations are reviewed apart from its index
    (`handbook` -> `handbook_reranker`)."""
    return f"{collection}{RERANKER_SUFFIX}"


def generation_index(product: str, fingerprint: str) -> str:
    """The table and tracking key of one product's generation (one fingerprint)."""
    return f"{product}{GENERATION_SEPARATOR}{fingerprint}"


def generation_product(index: str) -> str:
    """The product a generation belongs to (`handbook__68b2...` -> `handbook`)."""
    product, separator, fingerprint = index.rpartition(GENERATION_SEPARATOR)
    if not separator or not product or not fingerprint:
        raise ValueError(f"{index!r} is not a generation name (<product>__<fingerprint>)")
    return product


def companion_index(index: str, suffix: str) -> str:
    """A table that another product writes beside the generation `index` (a declared feed,
    `declaration.Feed`): `handbook__68b2...` and `_questions` -> `handbook_questions__68b2...`."""
    return generation_index(generation_product(index) + suffix, generation_fingerprint(index))


def question_index(index: str) -> str:
    """The companion table of a vector index generation that holds its collection's brief
    questions (`handbook__68b2...` -> `handbook_questions__68b2...`)."""
    return companion_index(index, QUESTIONS_SUFFIX)


def generation_fingerprint(index: str) -> str:
    """The fingerprint of a generation (`handbook__68b2...` -> `68b2...`)."""
    generation_product(index)  # validates
    return index.rpartition(GENERATION_SEPARATOR)[2]


def shard_partition(collection: str, shard: int) -> str:
    """The partition key of one shard of a collection."""
    return f"{collection}{SHARD_MARK}{shard:02d}"


def shard_number(partition: str) -> int:
    """The shard number of a shard's partition key (`handbook-s03` -> 3)."""
    return int(partition.rsplit(SHARD_MARK, 1)[1])


def shard_of(doc_id: str, shards: int) -> int:
    """The shard a document belongs to: a stable hash of its id (the same on every machine)."""
    return int(hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:8], 16) % shards
