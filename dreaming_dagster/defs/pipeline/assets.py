import time
from collections.abc import Callable

import dagster as dg

from dreaming_dagster.defs.layout import Step, dreaming_step, finish_dreaming_run, users_partitions
from dreaming_dagster.defs.pipeline.checks import (
    DUPLICATE_CHECK,
    MEGA_NODE_CHECK,
    ORPHAN_CHECK,
    PARKED_PAIRS_CHECK,
    duplicate_subjects_check,
    mega_node_check,
    orphan_pairs_check,
    parked_pairs_check,
)
from dreaming_dagster.defs.resources import (
    DreamingDatabaseResource,
    DreamingPolicyResource,
    EmbedderResource,
    LLMResource,
)
from dreaming_dagster.hubs import HubRule
from dreaming_dagster.pipeline import dating, graph_reports, linking
from dreaming_dagster.pipeline.merging import merge_ratio
from dreaming_dagster.pipeline.sync import STAGE_BY_ASSET, StageInputs, run_stage, upstream_of
from dreaming_dagster.reporting import graph_report_markdown, top_subjects_markdown
from dreaming_dagster.storage import user_graphs


def stage_asset(stage: str, **spec):
    """The asset of a dreaming stage: named after it, partitioned by user (hash buckets of users re-partition
    it as the code location loads, defs/layout.py), in the dreaming group, after the stage before it in
    pipeline/sync.STAGES (the order is stated there, once)."""
    return dg.asset(name=stage, partitions_def=users_partitions, group_name="dreaming",
                    deps=upstream_of(stage), **spec)


class PairSubjectsConfig(dg.Config):
    rebuild: bool = False  # clear the user's graph and reset every checkpoint first (rebuild_user_graph)


def run_for_users(context: dg.AssetExecutionContext, step: Step,
                  inputs_for: Callable[[str], StageInputs]) -> tuple[dict, float]:
    """Run this asset's stage (pipeline/sync.STAGES) for each user of the step, each of the user's graphs
    under the graph lock; sum the stats. In a bucket's step, a user whose stage raises is logged and counted
    (``failed_users``) and the others go on: the user's work stays pending, and the sensor asks again."""
    totals: dict = {}
    started = time.perf_counter()
    stage = STAGE_BY_ASSET[context.asset_key.path[-1]]
    users = step.users
    for number, user_id in enumerate(users, 1):
        inputs = inputs_for(user_id)
        try:
            run_stage(stage, inputs, user_graphs.user_kgs(inputs.database, user_id), totals)
        except Exception as error:
            if not step.isolates_failures:
                raise
            totals["failed_users"] = totals.get("failed_users", 0) + 1
            # Neither the user id nor the error's text (it may quote memory): Dagster's event log outlives an
            # erasure. The run's list (bucket_run_users, in user order) tells an operator who it was.
            context.log.warning(f"{stage.asset} failed for user {number} of the run's {len(users)} "
                                f"(bucket_run_users): {type(error).__name__}")
    if step.user is None:  # counts only: Dagster's event log keeps no user's subject names or error text
        totals = {key: len(value) if isinstance(value, list) else value for key, value in totals.items()
                  if isinstance(value, int | float | list) and not isinstance(value, bool)}
        totals["users"] = len(users)
    return totals, time.perf_counter() - started


def checks_over(step: Step, check: Callable[[str], dg.AssetCheckResult],
                name: str, asset: str) -> dg.AssetCheckResult:
    """A graph check for the step's users: the user's own result in a user's step; in a bucket's, one result
    that passes when every user passes, with how many failed."""
    if step.user is not None:
        return check(step.user)
    users = step.users
    results = [check(user_id) for user_id in users]
    failing = sum(not result.passed for result in results)
    return dg.AssetCheckResult(check_name=name, asset_key=asset, passed=failing == 0,
                               severity=results[0].severity if results else dg.AssetCheckSeverity.ERROR,
                               metadata={"users_checked": len(users), "users_failing": failing})


def merging_inputs(dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                   dreaming_policy: DreamingPolicyResource) -> Callable[[str], StageInputs]:
    """What the merge stage and the link janitor (which re-merges with the same rule) both need, by user."""
    policy, database, model = dreaming_policy.settings(), dreaming_db.database(), embedder.embedder()
    return lambda user_id: StageInputs(database, user_id, embedder=model, threshold=policy.merge_threshold,
                                       hubs=HubRule.from_settings(policy))


def _metadata(stats: dict, seconds: float, **extra) -> dict:
    return {**{key: value for key, value in stats.items() if value is not None},
            "seconds": round(seconds, 3), **extra}


@stage_asset("pair_dates", kinds={"postgres"})
def pair_dates(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource) -> dg.MaterializeResult:
    """The times each pair's user turn mentions ("last Saturday", "in May", "two weeks ago"), resolved
    against when the pair was said into day ranges with a granularity (pair_times), offline and
    deterministic (the grammar in dates/). Recall's time_fit signal and time-window pool read them.
    Metadata: the pairs dated this run and how many of the user's pairs carry a dated event."""
    database = dreaming_db.database()
    step = dreaming_step(context, database)
    totals, seconds = run_for_users(context, step, lambda user_id: StageInputs(database, user_id))
    return dg.MaterializeResult(metadata=_metadata(totals, seconds, **dated_share(database, step.user)))


def dated_share(database, user_id: str | None) -> dict:
    """How many of a user's pairs carry a dated event (a bucket's step reports no one user's)."""
    if user_id is None:
        return {}
    carried = dating.dated_pair_counts(database, user_id)
    return {"pairs_with_dated_events": carried["with_times"], "user_pairs": carried["pairs"],
            "dated_share": round(carried["with_times"] / carried["pairs"], 3) if carried["pairs"] else 0.0}


@stage_asset("pair_keys", kinds={"postgres", "python"})
def pair_keys(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource,
              embedder: EmbedderResource) -> dg.MaterializeResult:
    """Each pair's index keys, each a row with its vector and words (memory_keys): the sentences where the
    user states something about themselves (preferences, habits, possessions, relations, plans) and the
    dated events of the user's turn, offline and deterministic (extraction/keys.py); an LLM extractor's facts
    are written by pair_subjects. Recall draws candidates
    by key and ranks them with key_match. Metadata: the pairs keyed this run and the keys written."""
    database, model = dreaming_db.database(), embedder.embedder()
    totals, seconds = run_for_users(context, dreaming_step(context, database),
                                    lambda user_id: StageInputs(database, user_id, embedder=model))
    return dg.MaterializeResult(metadata=_metadata(totals, seconds))


@stage_asset(
    "pair_subjects",
    kinds={"postgres", "openai"},
    pool="llm",
    check_specs=[dg.AssetCheckSpec(PARKED_PAIRS_CHECK, asset="pair_subjects",
                                   description="No pair has failed extraction on every attempt (parked pairs "
                                   "are retried after a cool-down; `dreaming retry-failed` retries them now).")],
)
def pair_subjects(context: dg.AssetExecutionContext, config: PairSubjectsConfig,
                  dreaming_db: DreamingDatabaseResource, llm: LLMResource,
                  embedder: EmbedderResource) -> dg.MaterializeResult:
    """Stage 2: a one-sentence summary and 0–5 durable subjects per memory pair, from the configured LLM
    (structured JSON, with the facts the user states, written as fact keys) or the offline extractor (spaCy
    entities and noun phrases). A pair whose extraction fails keeps attempts and
    last_error and is retried on later runs without blocking others; after its last attempt it is parked and
    retried once per cool-down."""
    database, extractor, model = dreaming_db.database(), llm.extractor(), embedder.embedder()
    step = dreaming_step(context, database)
    if config.rebuild:
        for user_id in step.users:
            for kg_id in user_graphs.user_kgs(database, user_id):
                with user_graphs.user_graph_lock(database, user_id, kg_id):
                    linking.clear_user_graph(database, user_id, kg_id)
        context.log.info(f"cleared the graphs of {len(step.users)} user(s); every stage runs again")
    totals, seconds = run_for_users(context, step, lambda user_id: StageInputs(
        database, user_id, extractor=extractor, embedder=model))
    if totals.get("failures"):
        context.log.warning(f"{totals['failures']} pair(s) failed extraction: {totals.get('last_error')}")
    parked = checks_over(step, lambda user_id: parked_pairs_check(database, user_id), PARKED_PAIRS_CHECK,
                         "pair_subjects")
    return dg.MaterializeResult(metadata=_metadata(
        totals, seconds, provider=extractor.provider, rebuilt=config.rebuild,
        **({"parked_pairs": parked.metadata["parked_pairs"].value} if step.user else {}),
        pairs_per_second=round(totals.get("pairs", 0) / seconds, 1) if seconds else 0.0),
        check_results=[parked])


@stage_asset(
    "subjects",
    kinds={"postgres", "pgvector"},
    check_specs=[dg.AssetCheckSpec(DUPLICATE_CHECK, asset="subjects",
                                   description="No two live subjects of a user's graph share a name.")],
)
def subjects(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource,
             embedder: EmbedderResource, dreaming_policy: DreamingPolicyResource) -> dg.MaterializeResult:
    """Stage 3: each extracted subject merges into the user's closest live subject (top-5 cosine ≥ the merge
    threshold of the dreaming_policy resource, DREAMING_MERGE_THRESHOLD: first name wins, description appended
    with ' | ', reinforced) or is inserted, guarded by a unique md5(subject_text) index."""
    database = dreaming_db.database()
    step = dreaming_step(context, database)
    totals, seconds = run_for_users(context, step, merging_inputs(dreaming_db, embedder, dreaming_policy))
    totals["merge_ratio"] = merge_ratio(totals.get("created", 0), totals.get("merged", 0))
    return dg.MaterializeResult(
        metadata=_metadata(totals, seconds, threshold=dreaming_policy.settings().merge_threshold),
        check_results=[checks_over(step, lambda user_id: duplicate_subjects_check(database, user_id),
                                   DUPLICATE_CHECK, "subjects")])


@stage_asset(
    "subject_links",
    kinds={"postgres"},
    check_specs=[
        dg.AssetCheckSpec(MEGA_NODE_CHECK, asset="subject_links",
                          description="Once a user has 50+ pairs, no subject links more than half of them."),
        dg.AssetCheckSpec(ORPHAN_CHECK, asset="subject_links",
                          description="No pair is marked stored without links when it had subjects."),
    ],
)
def subject_links(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource,
                  embedder: EmbedderResource, dreaming_policy: DreamingPolicyResource) -> dg.MaterializeResult:
    """Stage 4: the bipartite graph itself, one subject_memory_pair_links row per (subject, pair), written with
    ON CONFLICT DO NOTHING and the pair's kg_stored_at in the same transaction. A janitor first re-runs pairs
    marked stored with zero links; after it, hubs (subjects over the graph_hub_share of the user's pairs,
    DREAMING_GRAPH_HUB_SHARE) are flagged, kept browsable and given no ranking weight. Metadata: the graph's
    shape (singletons, subjects per pair, largest subject, hubs, generic names)."""
    database = dreaming_db.database()
    step = dreaming_step(context, database)
    totals, seconds = run_for_users(context, step, merging_inputs(dreaming_db, embedder, dreaming_policy))
    return dg.MaterializeResult(
        metadata=_metadata(totals, seconds, **graph_shape(database, step.user)),
        check_results=[checks_over(step, lambda user_id: mega_node_check(database, user_id),
                                   MEGA_NODE_CHECK, "subject_links"),
                       checks_over(step, lambda user_id: orphan_pairs_check(database, user_id),
                                   ORPHAN_CHECK, "subject_links")])


def graph_shape(database, user_id: str | None) -> dict:
    """A user's graph as the UI shows it: its counts, top subjects and a report (a bucket's step shows no
    one user's)."""
    if user_id is None:
        return {}
    graph = graph_reports.graph_stats(database, user_id)
    return {"graph_subjects": graph["subjects"], "graph_links": graph["links"], "graph_pairs": graph["pairs"],
            "failing_pairs": graph["failing_pairs"], **top_subjects_shown(database, user_id),
            "graph": dg.MetadataValue.md(graph_report_markdown(user_id, graph_reports.graph_report(database, user_id)))}


def top_subjects_shown(database, user_id: str | None) -> dict:
    """A user's ten most linked subjects as a table (a bucket's step shows no one user's)."""
    if user_id is None:
        return {}
    top = graph_reports.top_subjects(database, user_id, limit=10)
    return {"top_subjects": dg.MetadataValue.md(top_subjects_markdown(user_id, top))}


@stage_asset(
    "refined_subjects",
    kinds={"postgres", "openai"},
    pool="llm",
)
def refined_subjects(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource,
                     embedder: EmbedderResource, llm: LLMResource) -> dg.MaterializeResult:
    """Stage 5: subjects whose descriptions became ' | ' junk drawers get a clean 2–5 word name and a 1–3
    sentence narrative (in batches, several LLM calls in flight, or offline synthesis), then are re-embedded
    so later merges compare against the consolidated subject. Last, the user's retrieval profile (pair and
    subject counts, mean subject embedding) that recall's ranker reads is refreshed."""
    database, model, refiner = dreaming_db.database(), embedder.embedder(), llm.refiner()
    step = dreaming_step(context, database)
    totals, seconds = run_for_users(context, step, lambda user_id: StageInputs(
        database, user_id, embedder=model, refiner=refiner))
    finish_dreaming_run(context, database)  # the last stage: a bucket run's user list is done with
    if totals.get("failures"):
        context.log.warning(f"{totals['failures']} subject(s) failed refinement: {totals.get('last_error')}")
    return dg.MaterializeResult(metadata=_metadata(
        totals, seconds, provider=refiner.provider, **top_subjects_shown(database, step.user)))
