"""Stage 2 of dreaming: a summary and 0–5 durable subjects per memory pair."""
