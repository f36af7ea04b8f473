"""Training and evaluating the Composite ranker on LongMemEval: pure logic the Dagster ranker assets call."""
