"""Turning documents into model input: decoding and checking bytes, normalising
Markdown, reStructuredText, HTML and text, and chunking with the model's tokenizer."""
