"""FAKE inference resource for tests: the deterministic `FakeEmbedder` under the `inference`
resource key, so Dagster tests of planning, landing, generations and sensors load no model."""

from pydantic import PrivateAttr

from batch_pipeline.inference.fake import FakeEmbedder
from batch_pipeline.inference.models import ResolvedModel
from resources.inference import InferenceResource


class FakeInferenceResource(InferenceResource):
    """NOT A MODEL: embeds with `FakeEmbedder` (hashed bags of words). For tests only."""

    _fakes: dict = PrivateAttr(default_factory=dict)

    def runner(self, model: ResolvedModel) -> FakeEmbedder:  # type: ignore[override]
        key = str(model.path)
        if key not in self._fakes:
            self._fakes[key] = FakeEmbedder(model)
        return self._fakes[key]
