"""The token arithmetic behind docs/deploy.md's LLM cost per 1,000 pairs.

    .venv/bin/python bench/llm_cost.py

Reads measured inputs — the prompt files' sizes (cl100k), the mean LongMemEval pair size and the share
of pairs that led to a refinement (bench/results/ingest.json and dreaming.json) — and states the
assumptions it cannot measure here without an LLM (typical output sizes). Results:
bench/results/llm_cost.json.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from common import RESULTS, bench_parser, machine  # first: puts the project on the import path

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.ingest.tokens import count_tokens
from dreaming_dagster.prompts import load_prompt

# Not measurable offline: what a chat model typically writes back (bounded by the clients' max_tokens).
ASSUMED = {"extraction_output_tokens": 150, "refinement_input_description_tokens": 250,
           "refinement_output_tokens": 80, "consolidation_output_tokens": 4000}
PRICES = {"small model ($0.15 / $0.60 per M)": (0.15, 0.60), "large model ($2.50 / $10 per M)": (2.50, 10.0)}


def main() -> None:
    parser = bench_parser(__doc__, "llm_cost")
    args = parser.parse_args()
    ingest = json.loads((RESULTS / "ingest.json").read_text())
    dreaming = json.loads((RESULTS / "dreaming.json").read_text())
    settings = DreamingSettings()
    pair_tokens = ingest["tokens_per_pair_mean"]
    prompts = {name: count_tokens(load_prompt(name)) for name in ("extraction", "refinement", "dream")}
    run = dreaming["throughput"]
    refinements_per_pair = run["stages_last_run"]["refinement"]["refined"] / run["pairs"]
    pairs = 1000
    passes = pairs * pair_tokens / settings.dream_token_threshold
    tokens_in = (pairs * (prompts["extraction"] + pair_tokens)
                 + pairs * refinements_per_pair * (prompts["refinement"] + ASSUMED["refinement_input_description_tokens"])
                 + passes * (prompts["dream"] + settings.dream_max_input_tokens))
    tokens_out = (pairs * ASSUMED["extraction_output_tokens"]
                  + pairs * refinements_per_pair * ASSUMED["refinement_output_tokens"]
                  + passes * ASSUMED["consolidation_output_tokens"])
    results = {"command": "bench/llm_cost.py", "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": machine(),
               "measured": {"prompt_tokens": prompts, "pair_tokens_mean": pair_tokens,
                            "refinements_per_pair": round(refinements_per_pair, 3),
                            "consolidation_passes_per_1000_pairs": round(passes, 2)},
               "assumed": ASSUMED,
               "per_1000_pairs": {"input_tokens": round(tokens_in), "output_tokens": round(tokens_out),
                                  **{label: round(tokens_in / 1e6 * p_in + tokens_out / 1e6 * p_out, 2)
                                     for label, (p_in, p_out) in PRICES.items()}}}
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
