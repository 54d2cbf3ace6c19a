"""What each column of the ticket product's stage files and tables holds, shown in the
Dagster UI's column schema. The ticket product's own table of descriptions: a name here can
mean something else than in the vector index's (`input_text` is a ticket's subject and body,
not a document's chunk)."""

from batch_pipeline.stages.columns import COLUMN_DESCRIPTIONS

TICKET_COLUMN_DESCRIPTIONS: dict[str, str] = {
    # collect (ticket_exports)
    "ticket_id": "The ticket's id in the export (unique within its day).",
    "day": "The daily partition the ticket belongs to (YYYY-MM-DD, in tickets.timezone).",
    "created_at": "When the ticket was created, as the export says (UTC).",
    "subject": "The ticket's subject line.",
    "body": "The ticket's body text.",
    "channel": "Where the ticket came in (email, chat, ...), as the export says.",
    "label": "The intent an agent assigned when resolving the ticket, where the export has it.",
    "status": "ok, or failed (the row could not be classified; see error_reason).",
    "error_reason": "Why the row failed: a short label (missing_body, duplicate_id, ...).",
    "error_message": "Why the row failed, in words.",
    # prepare, plan, execute (ticket_inputs, ticket_batch_plan, ticket_embeddings)
    "input_text": "The exact model input: the document prefix, then subject and body, cut by "
    "tokens to tickets.max_tokens.",
    "input_hash": "SHA-256 of the exact model input: with the model fingerprint, whether the "
    "ticket needs a vector.",
    "token_count": "Tokens of the model input, special tokens included.",
    "input_ids": COLUMN_DESCRIPTIONS["input_ids"],  # the same ids, carried the same way
    "stale": "Whether no generation of this model holds a vector for this input yet.",
    "batch_index": "The batch the input is planned in.",
    "vector": "The ticket's embedding.",
    "resumed": "Whether the vector came from an interrupted run's checkpoint.",
    "embedded_at": "When the vector was computed (UTC).",
    # land (ticket_intents)
    "intent": "The intent the ticket was classified as, or unknown when none is clear enough.",
    "confidence": "How often an answer this sure is right: the chosen intent's probability, "
    "calibrated on held-out tickets (with calibration none, the head's own score: a cosine for "
    "prototype, a probability for logistic).",
    "top_intents": "The three likeliest intents, likeliest first.",
    "top_scores": "Their scores, as confidence is, in the same order.",
    "model_fingerprint": "Hash of what the ticket's vector depends on: the model and the input "
    "cut.",
    "taxonomy_version": "Hash of the taxonomy file the ticket was classified against.",
    "run_id": "The run that classified the ticket.",
    "classified_at": "When the ticket was classified (UTC).",
    # with tickets.cascade
    "head_intent": "The classifier's intent, before the cascade: intent differs where the chat "
    "model answered otherwise.",
    "answered_by": "Which model gave intent: classifier, or the cascade's chat model (by name) "
    "where the ticket's confidence (the classifier's) was under the cascade's threshold.",
    "answer_cost": "What the chat model's answer cost, in the cost section's currency (its "
    "share of the ask's device time); 0 where the classifier answered.",
}
