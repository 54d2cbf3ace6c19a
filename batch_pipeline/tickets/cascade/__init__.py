"""The ticket intents' cascade: the tickets the classifier is least sure of, answered by a
chat model instead.

- `threshold`: the escalation threshold and its guarantee (the chance that the cascade
  misses its target accuracy);
- `chat`: asking the chat model, on a generate executor by name, with its answers kept;
- `generation`: a generation's cascade as the product runs it (its threshold recorded, a
  day's escalation, the review's figures).
"""
