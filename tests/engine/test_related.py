"""Related documents, the fourth product, on 20 pages of the sample handbook indexed with the
real all-MiniLM-L6-v2: every page gets its k most related pages; staleness is "the changed
documents plus their neighbours" (a one-page edit re-scores exactly that page's list, the
lists holding it and its candidates' lists, counted here; a rerun scores nothing); a deleted
page's list goes and the lists holding it are re-scored; with a promoted reranker, the pairs
are scored by the score family's executor and every row names it; the review scores the
lists against the pages' own "Related articles" links."""

import json
import shutil
from pathlib import Path

import pytest

from batch_pipeline import cli
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.index.product import open_partition
from batch_pipeline.inference.rerankers import build_test_cross_encoder
from batch_pipeline.products import product_env
from batch_pipeline.related import land as related_land
from batch_pipeline.related.kind import RELATED
from batch_pipeline.related.links import folder_links
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore

HANDBOOK = Path(__file__).resolve().parents[2] / "data" / "handbook"
PAGES = sorted(p.relative_to(HANDBOOK).as_posix() for p in HANDBOOK.rglob("*.md"))[:20]
EDITED = PAGES[3]


@pytest.fixture()
def site(tmp_path):
    """20 handbook pages, their links as the labelled set, and a config with `related:`."""
    docs = tmp_path / "docs"
    for page in PAGES:
        (docs / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(HANDBOOK / page, docs / page)
    links = folder_links(docs)
    (tmp_path / "links.jsonl").write_text(
        "".join(json.dumps({"doc_id": d, "related": r}) + "\n" for d, r in links.items())
    )
    return tmp_path


def configure(
    site, related: str = "{k: 3, candidates: 6, evaluation: {path: links.jsonl}}", extra: str = ""
) -> Path:
    config = site / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: handbook\n"
        '    source: {kind: filesystem, path: docs, glob: "**/*.md"}\n'
        f"    related: {related}\n" + extra
    )
    return config


class Site:
    """The collection's index and related documents at one home, as a run opens them."""

    def __init__(self, site: Path, runner) -> None:  # noqa: ANN001
        self.config = load_config(site / "pipeline.yaml")
        self.storage = resolve_storage(str(site / "home"))
        self.tracking = TrackingStore(self.storage.tracking_url)
        self.store = VectorStore(self.storage.lancedb_uri)
        self.runner = runner

    def index(self, run_id: str) -> None:
        partition = open_partition(self.config, self.storage, "handbook", self.tracking, self.store)
        partition.run(run_id, self.runner)
        partition.product.review(lambda model: self.runner)

    def product(self):  # noqa: ANN201
        env = product_env(self.config, self.storage, self.tracking, self.store)
        return RELATED.open(env, RELATED.targets(self.config)[0])

    def related(self, run_id: str) -> dict:
        product = self.product()
        summaries = product.partition("handbook").run(run_id, lambda: self.runner)
        return {
            "summaries": summaries,
            "review": product.product.review(lambda m: self.runner),
            "engine": product.product,
        }

    def lists(self) -> dict[str, list[str]]:
        engine = self.product().product
        table = self.store.open(engine.live().index).to_arrow().to_pylist()
        found: dict[str, list[tuple[int, str]]] = {}
        for row in table:
            found.setdefault(row["doc_id"], []).append((row["rank"], row["related_id"]))
        return {d: [r for _, r in sorted(rows)] for d, rows in found.items()}


def scored(result: dict) -> set[str]:
    """The documents whose lists the run scored."""
    return set(result["summaries"]["land"].summary.landed)


def test_every_page_gets_its_k_most_related_pages_and_a_rerun_scores_nothing(site, runner):
    configure(site)
    s = Site(site, runner)
    with pytest.raises(Exception, match="no live index"):
        s.related("too-early")
    s.index("index-1")
    first = s.related("related-1")
    assert scored(first) == set(PAGES)
    assert first["review"].decision == "promoted"  # the first complete generation
    lists = s.lists()
    assert set(lists) == set(PAGES)
    assert all(len(found) == 3 and doc not in found for doc, found in lists.items())
    assert "link_recall_at_3" in first["review"].scores["candidate"]
    rows = s.store.open(first["engine"].live().index).to_arrow().to_pylist()
    assert {r["model_name"] for r in rows} == {"candidates"}  # no reranker: their own scores
    assert all(
        r["doc_version"] and r["related_version"] and r["run_id"] == "related-1" for r in rows
    )
    again = s.related("related-2")
    assert scored(again) == set() and again["summaries"]["execute"].stats.pairs == 0
    assert s.lists() == lists


def test_lists_land_a_bounded_number_to_a_commit_and_each_whole(site, runner, monkeypatch):
    configure(site)
    s = Site(site, runner)
    s.index("index-1")
    monkeypatch.setattr(related_land, "LISTS_PER_COMMIT", 3)
    first = s.related("related-1")
    table = s.store.open(first["engine"].live().index)
    assert table.version >= 1 + 7  # created, then 20 lists in 7 commits of at most 3
    lists = s.lists()
    assert set(lists) == set(PAGES) and all(len(found) == 3 for found in lists.values())
    (site / "docs" / EDITED).unlink()  # a deleted page: its list goes, those holding it change
    s.index("index-2")
    again = s.related("related-2")
    assert EDITED not in s.lists() and again["summaries"]["land"].summary.deleted == [EDITED]
    assert all(EDITED not in found and len(found) == 3 for found in s.lists().values())


def test_a_one_page_edit_rescores_that_page_and_its_neighbours_lists_only(site, runner):
    configure(site)
    s = Site(site, runner)
    s.index("index-1")
    s.related("related-1")
    before = s.lists()
    page = site / "docs" / EDITED
    page.write_text(page.read_text() + "\nAlso: exporting a workspace's audit log as CSV.\n")
    s.index("index-2")
    engine = s.product().product
    reader = engine.live_index_reader()
    ((_, vector),) = reader.vectors([EDITED])
    title = reader.passages([EDITED])[EDITED].query
    candidates = {c for c, _ in reader.candidates(EDITED, title, vector, 6)}
    holding = {d for d, found in before.items() if EDITED in found}
    expected = {EDITED} | holding | candidates
    assert len(expected) < len(PAGES)
    result = s.related("related-2")
    assert scored(result) == expected
    prepared = result["summaries"]["prepare"]
    assert (prepared.changed, prepared.listing_changed) == (1, len(holding - {EDITED}))
    assert s.related("related-3")["summaries"]["land"].summary.landed == []


def test_a_deleted_page_s_list_goes_and_the_lists_holding_it_are_rescored(site, runner):
    configure(site)
    s = Site(site, runner)
    s.index("index-1")
    s.related("related-1")
    gone = next(d for d, found in s.lists().items() if found)  # a page on some lists
    holding = {d for d, found in s.lists().items() if gone in found}
    (site / "docs" / gone).unlink()
    s.index("index-2")
    result = s.related("related-2")
    assert result["summaries"]["land"].summary.deleted == [gone]
    assert holding - {gone} <= scored(result)
    assert gone not in s.lists() and all(gone not in found for found in s.lists().values())


def test_a_run_naming_an_executor_with_no_live_reranker_says_it_was_not_used(site, runner, capsys):
    configure(site)
    s = Site(site, runner)
    s.index("index-1")
    base = ["--config", str(site / "pipeline.yaml"), "--home", str(site / "home")]
    run = [*base, "run", "--kind", "related", "--collection", "handbook"]
    assert cli.main([*run, "--executor", "vllm", "--run-id", "related-1"]) == 0
    said = capsys.readouterr().out
    assert "scored by candidates" in said
    assert (
        "  --executor vllm was not used: no reranker is live, so the candidates' own scores "
        "ordered the lists"
    ) in said
    assert cli.main([*run, "--run-id", "related-2"]) == 0  # none named: nothing to say
    assert "was not used" not in capsys.readouterr().out


def test_a_promoted_reranker_scores_the_pairs_and_every_row_names_it(site, runner, model):
    reranker = build_test_cross_encoder(model.path, site / "cross-encoder")
    (site / "eval.jsonl").write_text(json.dumps({"query": "x", "relevant": [PAGES[0]]}) + "\n")
    extra = (
        "    evaluation: {path: eval.jsonl}\n"
        f"    reranker: {{model: {reranker}, candidates: 10}}\n"
    )
    configure(site, extra=extra)
    s = Site(site, runner)
    s.index("index-1")
    index = open_partition(s.config, s.storage, "handbook", s.tracking, s.store).product
    generation = index.reranking.record()  # promoted by hand: as if it beat hybrid search
    index.registry.promote(generation.product, generation.fingerprint, "test", "test")
    result = s.related("related-1")
    rows = s.store.open(result["engine"].live().index).to_arrow().to_pylist()
    assert {r["model_name"] for r in rows} == {"cross-encoder"}
    assert {r["model_fingerprint"] for r in rows} == {generation.fingerprint}
    assert result["summaries"]["execute"].backend == "sentence-transformers"
    assert result["summaries"]["execute"].stats.pairs > 0


def test_related_needs_a_whole_collection_and_candidates_for_its_k(site):
    configure(site, "{k: 5, candidates: 3}")
    with pytest.raises(ConfigError, match=r"related.*candidates \(3\) must be at least k \(5\)"):
        load_config(site / "pipeline.yaml")
    configure(site, "{k: 3}", extra="    shards: 2\n")
    with pytest.raises(ConfigError, match=r"related.*whole collection"):
        load_config(site / "pipeline.yaml")


def test_lists_left_stale_by_a_run_killed_mid_land_show_in_status(
    site, runner, monkeypatch, capsys
):
    """Round six: after a related run killed part-way through its commits, `status` said
    nothing of the lists it had not landed; it counts them, and the next run lands them."""
    configure(site)
    s = Site(site, runner)
    s.index("index-1")
    monkeypatch.setattr(related_land, "LISTS_PER_COMMIT", 3)
    real = related_land._candidates_in_order

    def killed_after_two_commits(prepared, stale):  # noqa: ANN001, ANN202
        for n, item in enumerate(real(prepared, stale)):
            if n == 6:  # two commits of three lists have landed
                raise KeyboardInterrupt("killed mid-land")
            yield item

    base = ["--config", str(site / "pipeline.yaml"), "--home", str(site / "home")]
    s.related("related-1")  # every list built once
    (site / "docs" / EDITED).write_text((site / "docs" / EDITED).read_text() + "\nMore.\n")
    for page in PAGES[:8]:  # eight pages changed: more lists stale than one commit holds
        (site / "docs" / page).write_text((site / "docs" / page).read_text() + "\nEdited.\n")
    s.index("index-2")
    assert cli.main([*base, "status"]) == 0
    assert "lists stale (the next run of handbook rebuilds them)" in capsys.readouterr().out
    monkeypatch.setattr(related_land, "_candidates_in_order", killed_after_two_commits)
    with pytest.raises(KeyboardInterrupt):
        s.related("related-2")
    monkeypatch.setattr(related_land, "_candidates_in_order", real)
    assert cli.main([*base, "status", "--json"]) == 0
    (related,) = [
        r for r in json.loads(capsys.readouterr().out) if r.get("kind") == "related_documents"
    ]
    assert related["stale_lists"] > 0  # the lists the killed run did not land
    s.related("related-3")
    assert cli.main([*base, "status", "--json"]) == 0
    (related,) = [
        r for r in json.loads(capsys.readouterr().out) if r.get("kind") == "related_documents"
    ]
    assert related["stale_lists"] == 0


def test_a_listed_neighbour_deleted_since_says_so_instead_of_an_empty_title(site, runner, capsys):
    configure(site)
    s = Site(site, runner)
    s.index("index-1")
    s.related("related-1")
    holder, found = next((d, found) for d, found in s.lists().items() if found)
    gone = found[0]
    (site / "docs" / gone).unlink()
    s.index("index-2")  # the related lists are not rebuilt yet: the holder's names `gone`
    base = ["--config", str(site / "pipeline.yaml"), "--home", str(site / "home")]
    assert cli.main([*base, "related", holder]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if f"  {gone}  " in line)
    assert line.endswith("(no longer in the live index: the next related run replaces it)")
    assert cli.main([*base, "related", holder, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["in_index"] for r in rows if r["related_id"] == gone] == [False]


def test_related_without_a_collection_says_what_to_give(site, capsys):
    from batch_pipeline.cli.context import CommandContext  # noqa: F401 - the command's own
    from batch_pipeline.cli.related import _collection

    class Context:
        config = None

    configure(site)
    extra = "  - name: second\n    source: {kind: filesystem, path: docs}\n    related: {k: 3}\n"
    (site / "pipeline.yaml").write_text((site / "pipeline.yaml").read_text() + extra)
    Context.config = load_config(site / "pipeline.yaml")
    with pytest.raises(ConfigError) as several:
        _collection(Context, None)
    assert str(several.value) == (
        "2 collections have related documents (handbook, second): give --collection"
    )
    (site / "pipeline.yaml").write_text(
        "collections:\n  - name: handbook\n    source: {kind: filesystem, path: docs}\n"
    )
    Context.config = load_config(site / "pipeline.yaml")
    with pytest.raises(ConfigError, match="no collection has related documents: add a `related:`"):
        _collection(Context, None)
