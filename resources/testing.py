"""FAKE resources for tests: the deterministic `FakeEmbedder` under the `inference` resource
key and `FakeGenerator` under the generation resource's, so Dagster tests of planning,
landing, generations and sensors load no model."""

from pydantic import PrivateAttr

from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.fake import FakeEmbedder, FakeGenerator, fake_chat_model
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.inference.vllm_generator import EngineSettings
from resources.generation import GenerationResource
from resources.inference import InferenceResource


class FakeInferenceResource(InferenceResource):
    """NOT A MODEL: embeds with `FakeEmbedder` (hashed bags of words). For tests only."""

    _fakes: dict = PrivateAttr(default_factory=dict)

    def runner(self, model: ResolvedModel) -> FakeEmbedder:  # type: ignore[override]
        key = str(model.path)
        if key not in self._fakes:
            self._fakes[key] = FakeEmbedder(model)
        return self._fakes[key]


class FakeGenerationResource(GenerationResource):
    """NOT A MODEL: generates with `FakeGenerator` (schema-shaped JSON from the prompt's
    words). For tests only."""

    _fake: FakeGenerator | None = PrivateAttr(default=None)

    def chat_model(self) -> ChatModel:
        return fake_chat_model()

    def engine_settings(self) -> EngineSettings:
        return EngineSettings(device="cpu", dtype="float32", kv_cache_gib=self.kv_cache_gib)

    def generator(self) -> FakeGenerator:  # type: ignore[override]
        if self._fake is None:
            self._fake = FakeGenerator(self.chat_model())
        return self._fake
