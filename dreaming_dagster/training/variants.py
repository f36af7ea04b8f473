"""The models one training run fits, by key, and the pools each is trained and judged on."""

from __future__ import annotations

from dreaming_dagster.training.train import TrainingData

VERSIONS = ("v6", "v5", "v4", "v3", "v2", "v1")
PUBLISHED_VERSION = VERSIONS[0]  # the newest: what recall() loads when it beats the rankings without a model
COSINE_POOL_VERSIONS = ("v2",)
ORACLE_MEMORY, S_MEMORY, LOCOMO_MEMORY, REALMEM_MEMORY = "oracle", "s", "locomo", "realmem"
# How each memory is named in reports; the people-chat memory is LoCoMo's conversations (training/locomo.py),
# the companion memory RealMem's personas (training/realmem.py).
MEMORY_NAMES = {ORACLE_MEMORY: "oracle", S_MEMORY: "`_S`", LOCOMO_MEMORY: "LoCoMo", REALMEM_MEMORY: "RealMem"}
# The ablations' model keys: the newest version trained on the pooled oracle alone, and without the time
# parts (no time-window candidates, no time_fit, no window feature), and without the keys (no key
# candidates, no key_match), and with key_match but no key candidates. v5 is the newest without the session
# and text-time signals, v4 without keys already; "-without-keys" also drops the key side.
# "-without-people-chat" is trained without LoCoMo's training conversations (the leave-one-distribution-out
# figure on its test conversation); "-without-graph-candidates" keeps every other side.
ORACLE_ONLY, WITHOUT_TIME, WITHOUT_KEYS, WITHOUT_KEY_CANDIDATES, WITHOUT_PEOPLE_CHAT, WITHOUT_GRAPH_CANDIDATES = (
    f"{PUBLISHED_VERSION}-{name}" for name in ("oracle-only", "without-time", "without-keys", "without-key-candidates",
                                               "without-people-chat", "without-graph-candidates"))
# The ablations that each drop a part recall could do without: trained with every seed, so that whether the part
# pays is told apart from the seeds' noise (FitReport.part_verdicts).
PART_ABLATIONS = (WITHOUT_TIME, WITHOUT_KEYS, WITHOUT_KEY_CANDIDATES, WITHOUT_GRAPH_CANDIDATES)
TIME_SIGNALS, KEY_SIGNALS = ("time_fit", "time_text"), ("key_match",)


def cosine_pool_key(version: str) -> str:
    return f"{version}-cosine-pool"


def ablation_data(data: TrainingData, key: str) -> TrainingData:
    """The pools a model key is trained and judged on."""
    if key == WITHOUT_TIME:
        return data.without_side("window", TIME_SIGNALS)
    if key == WITHOUT_KEYS:
        return data.without_side("key", KEY_SIGNALS)
    if key == WITHOUT_KEY_CANDIDATES:
        return data.without_side("key", ())
    if key == WITHOUT_GRAPH_CANDIDATES:
        return data.without_side("graph", ())
    if key.endswith("-cosine-pool"):
        return data.vector_pool()
    return data


def version_of(key: str) -> str:
    """The ranker version a model key trains: "v4-oracle-only" → "v4"."""
    return key.split("-", 1)[0]


def report_splits(data: TrainingData, training: dict) -> dict[str, list[int]]:
    """The question sets a run is reported on, by name: each distribution's held-out part, never used to
    choose anything (the oracle's validation questions, the `_S` test haystacks, LoCoMo's test
    conversation, RealMem's test persona), then the dev questions of each memory (which chose networks, epochs
    and settings)."""
    splits = {"oracle validation": data.rows_of(ORACLE_MEMORY, training["validation_ids"]),
              "`_S` test": data.rows_of(S_MEMORY, training.get("test_ids", [])),
              "LoCoMo test": data.rows_of(LOCOMO_MEMORY, training.get("test_ids", [])),
              "RealMem test": data.rows_of(REALMEM_MEMORY, training.get("test_ids", [])),
              "oracle dev": data.rows_of(ORACLE_MEMORY, training["dev_ids"]),
              "`_S` dev": data.rows_of(S_MEMORY, training["dev_ids"]),
              "LoCoMo dev": data.rows_of(LOCOMO_MEMORY, training["dev_ids"]),
              "RealMem dev": data.rows_of(REALMEM_MEMORY, training["dev_ids"])}
    return {name: rows for name, rows in splits.items() if rows}
