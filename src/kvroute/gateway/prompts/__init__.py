"""A routed prompt's token ids, as the engine's chat template and tokenizer make them."""
