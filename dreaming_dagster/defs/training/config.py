"""Run configuration of the ranker assets (editable in the launchpad)."""

from typing import Literal

import dagster as dg
from pydantic import Field

from dreaming_dagster.config.settings import DECLARED_DEFAULTS


class LongMemEvalMemoryConfig(dg.Config):
    dataset_path: str = Field(default="", description="LongMemEval-format file; empty: the shared oracle file "
                              "(or DREAMING_LONGMEMEVAL_PATH)")
    mode: Literal["one-user", "per-question"] = Field(
        default="one-user", description="one-user: every session is one user's memory (the reference's "
        "protocol); per-question: each question is its own user with its own haystack (LongMemEval's)")
    user_prefix: str = Field(default="longmemeval", description="benchmark user id (one-user) or its prefix")
    limit_questions: int | None = Field(default=None, ge=1, description="only the first N questions")


class LongMemEvalHaystacksConfig(dg.Config):
    dataset_path: str = Field(default="", description="LongMemEval `_S`-format file of the training questions' "
                              "haystacks; empty: the shared longmemeval_s_train.json.gz")
    training_questions: int = Field(default=100, ge=0, le=1000, description="training questions whose haystack "
                                    "becomes a user (a stratified sample; every dev question's always does)")
    held_out_questions: int | None = Field(default=None, ge=1, le=1000, description="dev and test questions "
                                           "whose haystack becomes a user, each a stratified sample of this many "
                                           "(empty: all 75 and 76)")
    user_prefix: str = Field(default="longmemeval-s", description="prefix of the per-question users")
    limit_questions: int | None = Field(default=None, ge=1, description="only the first N chosen questions "
                                        "in the file (a quick look)")


class LocomoMemoryConfig(dg.Config):
    dataset_path: str = Field(default="", description="LoCoMo file (conversations between two people); empty: "
                              "the shared locomo_train5.json")
    user_prefix: str = Field(default="locomo", description="prefix of the per-conversation users")


class RealmemMemoryConfig(dg.Config):
    dataset_path: str = Field(default="", description="directory of RealMem persona files "
                              "(<Name>_dialogues_256k.json); empty: the shared realmem directory")
    user_prefix: str = Field(default="realmem", description="prefix of the per-persona users")


class LongMemEvalPoolsConfig(dg.Config):
    pool_size: int = Field(default=50, ge=5, le=1000, description="candidates drawn by cosine per question")
    lexical_pool_size: int = Field(default=50, ge=0, le=1000, description="candidates drawn by BM25 per question "
                                   "(added to the cosine ones; 0: a cosine-only pool)")
    graph_pool_size: int = Field(default=DECLARED_DEFAULTS.recall_graph_pool_size, ge=0, le=1000,
                                 description="candidates reached through the subjects nearest the question (pairs "
                                 "the other sides missed; 0: none), as recall draws them")
    key_pool_size: int = Field(default=DECLARED_DEFAULTS.recall_key_pool_size, ge=0, le=1000,
                               description="candidates drawn through their index keys (pairs the other sides "
                               "missed; 0: none), as recall draws them")
    time_pool_size: int = Field(default=DECLARED_DEFAULTS.recall_time_pool_size, ge=0, le=1000,
                                description="when a question names a time, candidates drawn from inside its "
                                "window by cosine and by BM25, each (0: none), as recall draws them")


class RankerModelConfig(dg.Config):
    epochs: int = Field(default=50, ge=1, le=1000)
    hidden_choices: list[list[int]] = Field(default=[[128, 64], [32], []], description="the networks tried, "
                                            "by hidden layer widths ([]: linear in the query embedding and "
                                            "features); chosen by v6's worst-distribution dev NDCG@10 gain over the best ordering without a model "
                                            "trains every version")
    learning_rate: float = Field(default=1e-3, gt=0)
    seed: int = Field(default=0, description="the seed of the published models")
    seeds: list[int] = Field(default=[0, 1, 2], description="each network is trained with every seed; a "
                             "difference between networks within their seeds' spread is a tie the simpler wins")
    temperature: float = Field(default=0.05, gt=0, description="ApproxNDCG's sigmoid temperature")
    batch_size: int = Field(default=32, ge=1)
    promote: bool = Field(default=True, description="publish the newest model (v6) for recall() when it beats, on "
                           "every distribution's dev questions, that distribution's best ranking without a model")


class MemoryEncoderConfig(dg.Config):
    enabled: bool = Field(default=True, description="train the memory encoder; off: the benchmark memories and "
                          "the ranker stay on the configured embedder")
    seed: int = Field(default=0, description="seeds torch and the order of the training questions")
    epochs: int = Field(default=1, ge=1, le=10, description="passes over the training questions")
    rank: int = Field(default=8, ge=1, le=64, description="LoRA rank of each adapted layer")
    positive: Literal["random", "nearest"] = Field(
        default="nearest", description="the relevant pair a step trains on: any, or the one MiniLM ranks highest")
    hard_negatives: int = Field(default=0, ge=0, le=8, description="MiniLM's hardest non-relevant pairs beside "
                                "each positive (0: the batch's other questions' pairs alone; a hard negative "
                                "costs RealMem's dev persona)")
    negatives_outside_evidence: bool = Field(default=False, description="draw the hard negatives from sessions "
                                             "without a relevant pair (a session's unlabelled turns are not "
                                             "irrelevant ones)")
    limit_questions: int | None = Field(default=None, ge=1, description="train on this many questions (a quick look)")
    keep_without_gain: bool = Field(default=False, description="keep the trained encoder even where it does not "
                                    "beat MiniLM on every distribution's dev questions (a study of what follows; "
                                    "never for publishing)")
