"""A day's intent mix, and how far it moved from the trailing days'.

The shift is the total variation distance between the day's intent shares and the pooled
shares of the trailing days: half the sum of the absolute differences, from 0 (the same mix)
to 1 (no intent in common).
"""

import statistics
from collections import Counter
from dataclasses import dataclass, field

from batch_pipeline.config.taxonomy import UNKNOWN

TRAILING_DAYS = 7


def shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def total_variation(p: dict[str, float], q: dict[str, float]) -> float:
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


@dataclass
class IntentMix:
    """The intents of one day's tickets."""

    counts: dict[str, int] = field(default_factory=dict)
    confidences: list[float] = field(default_factory=list)
    shift: float | None = None  # against the trailing days; None without any

    @classmethod
    def of(cls, intents: list[str], confidences: list[float]) -> "IntentMix":
        return cls(dict(sorted(Counter(intents).items())), list(confidences))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def unknown_rate(self) -> float | None:
        return self.counts.get(UNKNOWN, 0) / self.total if self.total else None

    @property
    def mean_confidence(self) -> float | None:
        return statistics.fmean(self.confidences) if self.confidences else None

    def confidence_spread(self) -> dict[str, float]:
        """The 10th, 50th and 90th percentiles of the confidence."""
        if len(self.confidences) < 2:
            return {}
        deciles = statistics.quantiles(self.confidences, n=10, method="inclusive")
        return {"p10": deciles[0], "p50": statistics.median(self.confidences), "p90": deciles[-1]}

    def with_shift(self, trailing: list[dict[str, int]]) -> "IntentMix":
        """This mix, its shift measured against the pooled counts of `trailing` days."""
        pooled: Counter[str] = Counter()
        for counts in trailing:
            pooled.update(counts)
        shift = total_variation(shares(self.counts), shares(dict(pooled))) if pooled else None
        return IntentMix(self.counts, self.confidences, shift)

    def metadata(self, intents: list[str]) -> dict[str, object]:
        """The mix as one table (`intent_mix`: every intent's count, 0 included, largest
        first: one chart per intent would be 77 charts for a real taxonomy), and the few
        numbers the Dagster UI plots: tickets, the unknown rate, the confidence and the
        shift."""
        counts = {name: self.counts.get(name, 0) for name in [*intents, UNKNOWN]}
        values: dict[str, object] = {
            "tickets_classified": self.total,
            "intent_mix": dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
        }
        for key, value in (
            ("unknown_rate", self.unknown_rate),
            ("mean_confidence", self.mean_confidence),
            ("intent_mix_shift", self.shift),
            *((f"confidence_{k}", v) for k, v in self.confidence_spread().items()),
        ):
            if value is not None:
                values[key] = round(value, 4)
        return values
