"""The ticket intents' classifier: what a generation's model is and how it is made.

- `model`: `TicketModel`, a product's encoder, labelled history and each generation's
  classifier, trained once and cached (what `TicketProduct.classifier` holds);
- `heads`: the classifier heads over an encoder's vectors (prototype, logistic) and their
  predictions;
- `confidence`: their confidences calibrated (temperature scaling, the expected calibration
  error);
- `training`: a head trained on the labelled history, with the held-out texts the cascade's
  threshold is chosen on;
- `fine_tune`: the fine-tuned encoder, kept by its key;
- `history`: the labelled tickets training reads.
"""
