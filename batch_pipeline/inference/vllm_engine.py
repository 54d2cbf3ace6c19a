"""Starting vLLM's offline engine (`vllm.LLM`) in this process, for every model family: the
chat models' generator (`vllm_generator`) and the embedders' (`vllm_embedder`) start it alike.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so a Dagster step, a
test or the CLI needs no main guard and leaves no engine process behind. vLLM's records go
through `logging` (Dagster and the CLI decide where), errors only unless `VLLM_LOGGING_LEVEL`
says otherwise. On CPU the KV cache is `kv_cache_gib` of host memory.
"""

import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class EngineNotAvailableError(RuntimeError):
    """A model folder that vLLM could not load; the message says which and why in one line."""


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else "no message"


@contextmanager
def loading(what: str, error: type[Exception] = EngineNotAvailableError) -> Iterator[None]:
    """A model folder that does not load (a truncated weights file, a bad config) is `error`
    in one line; the cause stays attached for --debug."""
    try:
        yield
    except error:
        raise
    except Exception as cause:  # noqa: BLE001 - whatever the loaders raise, said in one line
        raise error(f"{what} did not load ({type(cause).__name__}: {first_line(cause)})") from cause


def prepare_process(device: str, kv_cache_gib: int) -> None:
    """This process's settings for an engine in it (see the module docstring)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in this process
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    logging.getLogger("vllm").setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"))
    if device == "cpu":
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)


def start_engine(
    folder: Path,
    what: str,
    device: str,
    kv_cache_gib: int,
    error: type[Exception] = EngineNotAvailableError,
    **options: object,
):  # noqa: ANN201 - vllm.LLM, imported here only
    """`vllm.LLM` over the model at `folder` with `options`, in this process; a folder that
    does not load is `error` naming `what`."""
    prepare_process(device, kv_cache_gib)
    with warnings.catch_warnings():
        # as it starts, vLLM's kernel dispatcher reads every attribute of every loaded
        # module, torch.distributed's deprecated `reduce_op` among them: two FutureWarnings
        # on every run, about vLLM and not about the run
        warnings.filterwarnings("ignore", message=".*reduce_op", category=FutureWarning)
        from vllm import LLM

        with loading(f"{what} at {folder}", error):
            return LLM(model=str(folder), use_tqdm_on_load=False, **options)
