"""The `batch-pipeline` command line: search, status, runs without Dagster, failures.

    batch-pipeline search "how do I reset my password" --collection handbook -k 5 [--json]
    batch-pipeline status [--product P] [--json]
    batch-pipeline run --collection C | --partition P | --product P [--kind K] [--doc-id ID ...]
    batch-pipeline report [--product P] [--runs N] [--json]
    batch-pipeline failures [--product P] [--json]
    batch-pipeline doctor [--product P] [--json]
    batch-pipeline generations list|promote|rollback [--product P]
    batch-pipeline invalidate-run RUN_ID
    batch-pipeline restore --collection C --before-run RUN_ID
    batch-pipeline repair --product P [--rebuild] [--yes]
    batch-pipeline run --day D | intents --day D | classify "TEXT"   (ticket intents)
    batch-pipeline run --collection C --kind briefs | briefs --collection C   (briefs)

A product is a collection's vector index (named after the collection), its document briefs
(`<collection>_briefs`) or the ticket intents (`tickets.name`); `--product NAME` names one in
every command, and `--kind` (index, briefs) says which of a collection's products `run`
runs. Status, doctor, report, failures and generations cover every product unless one is
named.

Configuration and state come from the same places as the Dagster code location:
`BATCH_PIPELINE_CONFIG` and `BATCH_PIPELINE_HOME` (or `--config` / `--home`).
"""

import argparse
import errno
import importlib
import signal
import sys
import threading
from types import ModuleType

import sqlalchemy as sa

from batch_pipeline.cli import batches as provider_batch_commands
from batch_pipeline.cli import executors, generations, health, run
from batch_pipeline.cli.context import CommandContext
from batch_pipeline.config import ConfigError, masked_url
from batch_pipeline.executors.batch_api import ProviderBatchError
from batch_pipeline.executors.run_batch import RunBatchError
from batch_pipeline.generations.registry import GenerationError
from batch_pipeline.generations.review import NoLiveGenerationError
from batch_pipeline.inference.chat_models import ChatModelNotAvailableError
from batch_pipeline.inference.models import ModelNotAvailableError
from batch_pipeline.products import KINDS
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.stages.generate import EngineFaultError
from batch_pipeline.state.tracking import LeaseLostError, LockTimeoutError, TrackingUnavailableError
from batch_pipeline.state.vector_store import TableDamagedError, missing_data_file


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="batch-pipeline", description="Keep a LanceDB vector index fresh; query it."
    )
    parser.add_argument("--config", help="pipeline YAML (default $BATCH_PIPELINE_CONFIG)")
    parser.add_argument("--home", help="state folder (default $BATCH_PIPELINE_HOME)")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error, not one line"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for module in command_modules():
        module.add_commands(commands)
    return parser


def _fault_line(error: BaseException) -> str | None:
    """One line for an infrastructure fault that stopped a command midway (a database that
    stopped answering, a full disk), with what to do; None for anything else."""
    if isinstance(error, sa.exc.SQLAlchemyError):
        cause = str(getattr(error, "orig", None) or error).strip().splitlines()
        first = masked_url(cause[0]) if cause else type(error).__name__
        return (
            f"a database stopped answering ({type(error).__name__}: {first}); what landed is "
            "kept and the next run resumes from its checkpoints: run again once it is back"
        )
    if (missing := missing_data_file(error)) is not None:
        return str(TableDamagedError(missing))
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        where = f" ({error.filename})" if error.filename else ""
        return (
            f"no space left on the device{where}; what landed is kept: free space under the "
            "home or staging folder and run again"
        )
    if isinstance(error, OSError):
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror or type(error).__name__}{where}"
    return None


class Stopped(BaseException):
    """A signal asked the command to stop (SIGTERM: a scheduler, an operator's kill). Raised
    where the command is, so every lease and temporary file is released on the way out; not
    an `Exception`, so nothing on the way takes it for a failure to handle."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if in_main_thread else None
    try:
        return _main(args)
    except Stopped as stopped:
        print(
            f"batch-pipeline: stopped by {signal.Signals(stopped.signum).name}; what landed "
            "stays and the partition's lease is released: the next run does what is still "
            "stale (execute resumes from its checkpoints)",
            file=sys.stderr,
        )
        return 128 + stopped.signum
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def command_modules() -> list[ModuleType]:
    """The modules of the commands, each with `add_commands(subparsers)` and `COMMANDS` (a
    command's name -> its function): those that cover every product, then the product
    kinds' own (`ProductKind.commands`)."""
    kinds = [importlib.import_module(kind.commands) for kind in KINDS if kind.commands]
    return [health, run, generations, provider_batch_commands, executors, *kinds]


def _main(args: argparse.Namespace) -> int:
    commands = {name: run for module in command_modules() for name, run in module.COMMANDS.items()}
    try:
        ctx = CommandContext(args)
        return commands[args.command](ctx, args)
    except (
        ConfigError,
        ModelNotAvailableError,
        NoLiveGenerationError,
        GenerationError,
        SourceUnavailableError,
        TrackingUnavailableError,
        LeaseLostError,
        LockTimeoutError,
        ProviderBatchError,
        RunBatchError,
        ChatModelNotAvailableError,
        EngineFaultError,
        ValueError,
    ) as error:
        if args.debug:
            raise
        print(f"batch-pipeline: {error}", file=sys.stderr)
        return 2
    except (sa.exc.SQLAlchemyError, OSError, RuntimeError) as error:
        line = _fault_line(error)
        if args.debug or line is None:
            raise
        print(f"batch-pipeline: {line} (--debug shows the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
