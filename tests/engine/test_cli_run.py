"""`batch-pipeline run` as a user runs it: its summary counts every stage's failures, and a
document that fails for a reason in its own content does not keep a new collection from
going live."""

import json
from pathlib import Path

from batch_pipeline import cli
from batch_pipeline.cli import run as run_commands
from tests.support import write_config, write_corpus

REPO = Path(__file__).resolve().parents[2]


def test_failures_of_every_stage_count_and_the_first_generation_goes_live(tmp_path, capsys):
    docs = write_corpus(tmp_path / "docs")
    (docs / "empty.md").write_bytes(b"")  # fails in collect
    (docs / "front-matter-only.md").write_text("---\ntitle: Nothing else\n---\n")  # in prepare
    config = write_config(tmp_path / "pipeline.yaml")
    base = ["--config", str(config), "--home", str(tmp_path / "home")]

    assert cli.main([*base, "run", "--collection", "handbook", "--json", "--run-id", "r1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["collect"]["documents_failed"] == 1
    assert report["prepare"]["documents_failed"] == 1
    assert report["documents_failed"] == 2  # the plain summary said 1 ("0" with prepare alone)
    # the execute key's old name stays for scripts until the next release (CHANGELOG.md)
    assert report["execute"]["chunks_embedded"] == report["execute"]["inputs_embedded"] > 0
    assert report["generation"]["state"] == "live"  # stayed "building" until quarantine

    assert cli.main([*base, "run", "--collection", "handbook", "--run-id", "r2"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(", 2 failed")

    assert cli.main([*base, "search", "reset my password", "--collection", "handbook"]) == 0
    assert "reset-password.md" in capsys.readouterr().out
    assert cli.main([*base, "doctor", "--json"]) == 1  # completeness still reports them
    (health,) = json.loads(capsys.readouterr().out)
    assert (health["documents_complete"], health["documents_intended"]) == (3, 5)
    assert any("completeness" in problem for problem in health["problems"])


def test_the_cli_reads_the_s3_endpoint_from_the_environment(
    tmp_path, capsys, monkeypatch, s3_bucket, moto_server
):
    """No endpoint_url in the YAML: the CLI, like the code location, reads
    BATCH_PIPELINE_S3_ENDPOINT_URL (it went to https://<bucket>.s3.amazonaws.com before)."""
    client, bucket = s3_bucket
    client.put_object(Bucket=bucket, Key="kb/refunds.md", Body=b"# Refunds\n\nWithin 30 days.\n")
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        f"collections:\n  - name: kb\n    source: {{kind: s3, bucket: {bucket}, prefix: kb/}}\n"
    )
    monkeypatch.setenv("BATCH_PIPELINE_S3_ENDPOINT_URL", moto_server)
    base = ["--config", str(config), "--home", str(tmp_path / "home")]
    assert cli.main([*base, "run", "--collection", "kb", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["land"]["documents_landed"] == 1


def test_run_names_a_product_by_its_name_and_a_kind_by_kind(tmp_path, capsys, monkeypatch):
    """`--product NAME` everywhere, `--kind` where a kind is meant; the old `--product
    briefs` still runs the briefs for a release, and says it is now `--kind briefs`."""
    write_corpus(tmp_path / "docs")
    (tmp_path / "prompt.yaml").write_text((REPO / "data" / "brief_prompt.yaml").read_text())
    (tmp_path / "schema.json").write_text((REPO / "data" / "brief_schema.json").read_text())
    config = write_config(
        tmp_path / "pipeline.yaml",
        extra="    briefs: {prompt: prompt.yaml, output_schema: schema.json}\n",
    )
    base = ["--config", str(config), "--home", str(tmp_path / "home")]
    ran: list[tuple[str, str]] = []
    real = run_commands.run_partition

    def run_partition(ctx, args, kind, key):  # noqa: ANN001, ANN202 - briefs recorded, not run
        if kind != "briefs":
            return real(ctx, args, kind, key)
        ran.append((kind, key))
        return 0

    monkeypatch.setattr(run_commands, "run_partition", run_partition)
    assert cli.main([*base, "run", "--product", "handbook_briefs"]) == 0
    assert cli.main([*base, "run", "--collection", "handbook", "--kind", "briefs"]) == 0
    assert ran == [("briefs", "handbook"), ("briefs", "handbook")]
    assert capsys.readouterr().err == ""

    assert cli.main([*base, "run", "--collection", "handbook", "--product", "briefs"]) == 0
    assert ran[-1] == ("briefs", "handbook")
    assert "--product briefs is now --kind briefs" in capsys.readouterr().err

    assert cli.main([*base, "run", "--product", "handbook", "--json", "--run-id", "r1"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == "r1"  # the vector index ran

    assert cli.main([*base, "run", "--product", "handbook", "--kind", "briefs"]) == 2
    assert "'handbook' is of kind index, not briefs" in capsys.readouterr().err
    assert cli.main([*base, "run", "--product", "nowhere"]) == 2
    assert "unknown product 'nowhere'; configured: handbook, handbook_briefs" in (
        capsys.readouterr().err
    )
    assert cli.main([*base, "run"]) == 2
    assert "run needs --collection, --partition, --day or --product" in capsys.readouterr().err
    # a kind nobody declared, and partitions no product runs, fail in one line; nothing
    # falls through to another product
    for args, said in (
        (
            ["--kind", "nosuch", "--collection", "handbook"],
            "unknown kind 'nosuch'; kinds: index, briefs, related, tickets",
        ),
        (
            ["--kind", "nosuch"],  # the unknown kind first, not "run needs --collection"
            "unknown kind 'nosuch'; kinds: index, briefs, related, tickets",
        ),
        (["--collection", "nowhere"], "no product runs the partition 'nowhere'"),
        (["--kind", "tickets", "--collection", "handbook"], "no product of kind tickets"),
        (["--day", "2026-11-29"], "no product runs the partition '2026-11-29'"),
    ):
        assert cli.main([*base, "run", *args, "--run-id", "r2"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"batch-pipeline: {said}") and err.count("\n") == 1, err
