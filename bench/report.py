"""docs/benchmarks.md from bench/results/*.json: every benchmark's figures, the command that produced
them, the machine and the date, in one page; and the tables of docs/performance.md (the headline figures,
the machine, what to tune); and every figure README and docs cite by key path, rewritten to the value its
result file holds now. `make bench` reruns every benchmark and then this.

    .venv/bin/python bench/report.py
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import citations

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
LAYOUT = ROOT / "bench" / "report_layout.toml"


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def machine(result: dict) -> str:
    m = result.get("machine", {})
    probe, speed = m.get("speed_probe"), ""
    if probe:
        speed = (f" · machine timing at start → end: Python loop {probe['at_start']['python_loop_ms']} → "
                 f"{probe['at_end']['python_loop_ms']} ms, matmul {probe['at_start']['matmul_ms']} → "
                 f"{probe['at_end']['matmul_ms']} ms (bench/common.speed_probe; lower is faster)")
    return f"{m.get('cpus', '?')} cores, no GPU, Python {m.get('python', '?')}{speed}"


Rows = list[tuple[str, str]]


def section(title: str, result: dict | None, rows: Rows, note: str = "") -> list[str]:
    if result is None:
        return [f"## {title}", "", "_not run yet_", ""]
    lines = [f"## {title}", "", f"`{result['command']}` · {result['date']} · {machine(result)}", "",
             "| measure | result |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows], ""]
    return lines + ([note, ""] if note else [])


# Sections whose rows are computed (joins, loops, derived figures); the plain ones are format strings in
# bench/report_layout.toml.

def recall_rows(r: dict) -> Rows:
    lat, m, sweep = r["latency_heavy_user"], r["model"], r["ef_search_sweep"]
    lex = r["lexical_pool_pruning"]
    d = r["data"]
    return [
        ("data", f"{d['heavy_user_pairs']:,} pairs, {d['heavy_user_subjects']:,} subjects, {d['heavy_user_links']:,} links, "
                 f"{d['heavy_user_postings']:,} postings; {d['light_users']} light users share the index ({d['vectors']}; {d['texts']})"),
        ("hybrid statement (vector + BM25 pool, twelve signals)", f"**p50 {lat['hybrid']['p50_ms']} ms, p99 {lat['hybrid']['p99_ms']} ms**"),
        ("composite statement, cosine pool only", f"p50 {lat['composite']['p50_ms']} ms, p99 {lat['composite']['p99_ms']} ms"),
        ("ratio hybrid / composite", f"**{lat['ratio_hybrid_to_composite_p50']}× at p50, {lat['ratio_hybrid_to_composite_p99']}× at p99**"),
        ("plain pgvector top-50 (one vector)", f"p50 {lat['plain']['p50_ms']} ms, p99 {lat['plain']['p99_ms']} ms; composite / plain {lat['ratio_composite_to_plain_p50']}× at p50"),
        ("hybrid + recording the last query", f"p50 {lat['hybrid_remember']['p50_ms']} ms"),
        *([("served: hybrid with recall()'s default graph and key sides", f"p50 {lat['served']['p50_ms']} ms, p99 "
            f"{lat['served']['p99_ms']} ms ({lat['ratio_served_to_composite_p50']}× the composite at p50)")]
          if "served" in lat else []),
        *([("served before index keys (the statement of the baseline revision, same data)",
            f"p50 {lat['served_before_keys']['p50_ms']} ms, p99 {lat['served_before_keys']['p99_ms']} ms; served "
            f"{lat['ratio_served_to_served_before_keys_p50']}× at p50, {lat['ratio_served_to_served_before_keys_p99']}× at p99")]
          if "served_before_keys" in lat else []),
        *([("served, a question naming a month (time_fit and the time-window side)",
            f"p50 {lat['served_month_window']['p50_ms']} ms, p99 {lat['served_month_window']['p99_ms']} ms "
            f"({lat['ratio_served_month_window_to_served_p50']}× served at p50)")]
          if "served_month_window" in lat else []),
        *([("served, the same month with the time side reading 5,000 in-window pairs (the whole month)",
            f"p50 {lat['served_month_window_wide_scan']['p50_ms']} ms, p99 {lat['served_month_window_wide_scan']['p99_ms']} ms "
            f"({lat['ratio_served_month_window_wide_scan_to_served_p50']}× served at p50)")]
          if "served_month_window_wide_scan" in lat else []),
        ("lexical index (every user's; bytes over every indexed pair)",
         f"{d['lexical_index_size']}, {d['lexical_index_bytes_per_pair']:,} bytes a pair" if "lexical_index_bytes_per_pair" in d
         else d["lexical_index_size"]),
        ("lexical pool by first round (share of the exact BM25 top-50 found, ties counted; hybrid / composite at p50)",
         "; ".join(f"{name}: {100 * v['share_of_exact_bm25_top_k_mean']:.1f}%, {v['ratio_to_composite_p50']}×"
                   for name, v in lex["rules"].items())),
        ("time inside the hybrid statement (one query, EXPLAIN ANALYZE)",
         ", ".join(f"{k} {v} ms" for k, v in r["plan_heavy_user"]["cte_ms"].items() if v >= 0.5)),
        ("model inference / file load / file size", f"{m['inference_ms']['p50_ms']} ms / {m['load_ms']['p50_ms']} ms / {m['v3_file_bytes'] // 1000} KB"),
        ("profile statement cached / live", f"{r['profile_statement']['cached']['p50_ms']} ms / {r['profile_statement']['live_as_of']['p50_ms']} ms"),
        ("vector pool vs exact top-50 by ef_search", ", ".join(f"{ef}: {v['pool_recall_mean']} (plain {v['plain_p50_ms']} ms)" for ef, v in sweep.items())),
        ("light user (200 pairs) composite", f"p50 {r['light_user']['composite']['p50_ms']} ms; pool = exact top-50 in {r['light_user']['pool_equals_exact_top_50']}"),
        *([("mid user sharing the index, served (its HNSW scans short: the exact path)",
            f"{r['mid_user']['pairs']:,} pairs: p50 {r['mid_user']['served']['p50_ms']} ms, p99 {r['mid_user']['served']['p99_ms']} ms "
            f"({r['mid_user']['ratio_served_to_heavy_served_p50']}× the heavy user's served); its exact scan alone "
            f"{r['mid_user']['exact_scan']['ms']} ms, {r['mid_user']['exact_scan']['buffers_per_pair']} buffers a pair")]
          if "mid_user" in r else []),
        ("recall() end to end (question embedded, profile, model, served statement)",
         f"p50 {r['recall_end_to_end']['recall']['p50_ms']} ms, p99 {r['recall_end_to_end']['recall']['p99_ms']} ms"),
        *[("the server's shared_buffers side by side (child processes taking turns, warm passes)",
           f"{sb['postgres_default']['shared_buffers']}: hybrid p50 {sb['postgres_default']['hybrid']['p50_ms']} ms, p99 "
           f"{sb['postgres_default']['hybrid']['p99_ms']} ms; {sb['embedded_default']['shared_buffers']} (the embedded "
           f"default): hybrid p50 {sb['embedded_default']['hybrid']['p50_ms']} ms, p99 "
           f"{sb['embedded_default']['hybrid']['p99_ms']} ms (×{sb['ratio_embedded_to_postgres_default_hybrid_p50']} / "
           f"×{sb['ratio_embedded_to_postgres_default_hybrid_p99']}); composite ×"
           f"{sb['ratio_embedded_to_postgres_default_composite_p50']} / ×{sb['ratio_embedded_to_postgres_default_composite_p99']}")
          for sb in [r.get("shared_buffers")] if sb]]


LONGMEMEVAL_METHODS = ("cosine", "bm25", "cosine+bm25 (RRF)", "cosine+bm25 (weighted)", "v5", "v6-oracle-only",
                       "v6-without-people-chat", "v6-without-time", "v6-without-keys", "v6-without-key-candidates",
                       "v6-without-graph-candidates", "v6 + sessions spread")


def longmemeval_rows(r: dict) -> Rows:
    overall = r["evaluation"]["overall"]
    haystacks, locomo, realmem = r["haystack_memory"], r["locomo_memory"], r.get("realmem_memory")
    personas = (f"; RealMem: {realmem['users']} personas, one user each ({realmem['questions']} queries)"
                if realmem else "")
    rows = [("memories", f"oracle pooled as one user ({r['memory']['answerable']} answerable questions); `_S`: "
                         f"{haystacks['questions']} haystacks, one user each ({haystacks['dev_questions']} dev, "
                         f"{haystacks['test_questions']} test, {haystacks['training_questions']} training questions); "
                         f"LoCoMo: {locomo['users']} conversations between people, one user each "
                         f"({locomo['questions']} questions){personas}"),
            ("shipped model", f"v6, hidden layers {r['shipped_model']['hidden']} (chosen over seeds "
                              f"{r['training']['seeds']}), sha256 {r['shipped_model']['sha256'][:12]}…"),
            *([("memory encoder", f"{'kept and shipped' if r['memory_encoder']['kept'] else 'not kept'} "
                                  f"({r['memory_encoder']['embedding_model']}); trained in "
                                  f"{r['memory_encoder']['training_seconds']} s; worst dev gain in cosine NDCG@10 "
                                  f"{r['memory_encoder']['worst_dev_gain']:+.3f}")]
              if r.get("memory_encoder", {}).get("embedding_model") else []),
            ("split (questions)", ", ".join(f"{part} {n}" for part, n in r["training"]["split"].items())),
            ("wall time per asset", ", ".join(f"{k} {s} s" for k, s in r["asset_seconds"].items()))]
    for split, results in overall.items():
        for name, key in (("Recall@10", "recall@10"), ("NDCG@10", "ndcg@10"), ("session recall_any@5", "session_any@5"),
                          ("session recall_all@10", "session_all@10")):
            rows.append((f"{split}: {name}", " · ".join(f"{m} {results[m][key]:.3f}" for m in LONGMEMEVAL_METHODS
                                                       if m in results) + f" · **v6 {results['v6'][key]:.3f}**"))
    return rows


def time_rows(r: dict) -> Rows:
    resolvers = " · ".join(f"{name} {100 * m['accuracy']:.1f}%" for name, m in r["resolvers"].items())
    parsing, dated = r["question_parsing"], r["dated_pairs"]
    rows = [(f"resolvers on the labelled set ({next(iter(r['resolvers'].values()))['expressions']} expressions)",
             resolvers),
            ("question parsing", f"p50 {parsing['p50_ms']} ms, p99 {parsing['p99_ms']} ms; {parsing['with_window']} of "
                                 f"{parsing['questions']} questions name a time"),
            ("pairs carrying a dated event", f"{dated['with_times']:,} of {dated['pairs']:,}")]
    for split in ("validation", "all"):
        for group, m in r["comparison"][split].items():
            if group in ("all questions", "with a time expression", "temporal-reasoning", "multi-session") and m["n"]:
                version = next(key for key in m["recall@10 with time"] if not key.startswith("cosine"))
                with_time, without = m["recall@10 with time"][version], m["recall@10 without time"][version]
                rows.append((f"{version} Recall@10, {group} ({split}, {m['n']} q)",
                             f"**{with_time:.3f}** with time vs {without:.3f} without ({with_time - without:+.3f})"))
    return rows


def lexical_rows(r: dict) -> Rows:
    return [("data", f"{r['pairs']:,} oracle pairs in one user, {r['answerable_questions']} answerable questions"),
            *[(name, f"Recall@10 {m['recall@10']:.3f} · MRR {m['mrr']:.3f} · NDCG@10 {m['ndcg@10']:.3f} · "
                     f"top-50 holds {100 * m['pool_recall']:.1f}% · p50 {m['p50_ms']} ms")
              for name, m in r["methods"].items()]]


def encoder_coverage_rows(r: dict) -> Rows:
    c = r["coverage"]["all pairs"]
    return [("data", f"{r['distinct_pairs']:,} distinct oracle pairs, {r['answerable_questions']} answerable questions"),
            ("word pieces per pair (median / p90)", f"{c['median_pieces']:.0f} / {c['p90_pieces']:.0f}; "
             f"{100 * c['share_over_window']:.1f}% exceed the {r['window_pieces']}-piece window"),
            ("share of word pieces read", f"whole pair {100 * c['pieces_read']:.1f}%; turns apart "
             f"{100 * c['pieces_read_user_and_assistant_apart']:.1f}%"),
            *[(f"cosine: {name}", f"Recall@10 {m['recall@10']:.3f} · NDCG@10 {m['ndcg@10']:.3f} · MRR {m['mrr']:.3f} · "
                                  f"top-50 holds {100 * m['pool_recall']:.1f}%")
              for name, m in r["cosine_ranking"].items()]]


def question_type_rows(r: dict) -> Rows:
    return [("5-fold cross-validated accuracy", f"**{r['cv_accuracy_5_fold']}** over {r['questions']} questions"),
            ("per type", ", ".join(f"{k} {v}" for k, v in r["cv_accuracy_per_type"].items()))]


def encoder_training_rows(r: dict) -> Rows:
    names = {"oracle": "oracle", "s": "`_S`", "locomo": "LoCoMo", "realmem": "RealMem"}

    def seeded(cells: dict) -> str:
        return f"{cells['mean']:.3f} ({cells['min']:.3f}–{cells['max']:.3f})"

    rows = []
    for memory, parts in r["minilm"].items():
        for part, cell in parts.items():
            lora = seeded(r["lora"]["ndcg@10"][memory][part]) if "lora" in r else "–"
            contexts = " · ".join(f"+ {name} {values[memory][part]['ndcg@10']:.3f}"
                                  for name, values in r["context"].items())
            rows.append((f"{names[memory]} {part} ({cell['questions']} questions)",
                         f"MiniLM {cell['ndcg@10']:.3f} · query adapter {seeded(r['adapter']['ndcg@10'][memory][part])}"
                         f" · LoRA {lora} · {contexts}"))
    return rows


def graph_expansion_rows(r: dict) -> Rows:
    chosen = r["rerank"]["chosen"]
    rows = []
    for part in ("dev", "test"):
        base, without = r["shipped"][part], r["without_graph_candidates"][part]
        rerank = (f" · re-ranked by shared subjects (k={chosen['leaders']}, λ={chosen['weight']}) "
                  f"{chosen[part].get('locomo-multi-hop', float('nan')):.3f}") if chosen else ""
        rows.append((f"LoCoMo {part}: multi-hop NDCG@10 ({r['questions'][part].get('locomo-multi-hop', 0)} questions)",
                     f"shipped {base.get('locomo-multi-hop', float('nan')):.3f} · without graph candidates "
                     f"{without.get('locomo-multi-hop', float('nan')):.3f}{rerank}"))
        rows.append((f"LoCoMo {part}: all questions, NDCG@10",
                     f"shipped {base['all']:.3f} · without graph candidates {without['all']:.3f}"
                     + (f" · re-ranked {chosen[part]['all']:.3f}" if chosen else "")))
        recall = r["pool_recall"][part]
        rows.append((f"LoCoMo {part}: pool recall", f"with graph candidates {recall['with graph candidates']:.3f} · "
                     f"without {recall['without']:.3f}"))
    for e in r["expansion"]:
        if e["part"] == "test":
            rows.append((f"test multi-hop: relevant pairs the pool misses, reached through the top {e['leaders']}'s subjects",
                         f"{e['relevant_reached']} of {e['relevant_missing']}, adding {e['pairs_added']:,} pairs"))
    return rows


def llm_cost_rows(r: dict) -> Rows:
    per = r["per_1000_pairs"]
    return [("input / output tokens", f"{per['input_tokens']:,} / {per['output_tokens']:,}"),
            *[(label, f"${cost}") for label, cost in per.items() if label.endswith(")")]]


def graph_rows(r: dict) -> Rows:
    # The offline extractor's rows (the entities one: spaCy).
    rows = [(f"extractor: {name}", f"{v['pairs_per_s']} pairs/s") for name, v in r["extractor_throughput"].items()
            if name.startswith("entities")]
    for name, h in r["health"].items():
        if name != "entities":
            continue
        rows.append((f"graph health, oracle one-user memory ({name})",
                     f"{h['subjects']:,} subjects over {h['pairs']:,} pairs; singletons {100 * h['singleton_share']:.1f}%; "
                     f"median {h['median_subjects_per_pair']} subjects a pair; largest {h['largest_subject']} "
                     f"({100 * h['largest_share']:.1f}%{', hub' if h['largest_is_hub'] else ''}); hubs {h['hubs']}; "
                     f"unflagged > 5% {h['unflagged_subjects_over_5pct']}; generic {100 * h['generic_share']:.1f}%"))
    if r.get("demo_health"):
        rows.append(("graph health, the demo's users (singletons, largest subject)", "; ".join(
            f"{u.removeprefix('demo-user-')}: {h['subjects']} subjects over {h['pairs']} pairs, "
            f"{100 * h['singleton_share']:.0f}%, {h['largest_subject']}" for u, h in r["demo_health"].items())))
    for name, a in r["ablation"].items():
        if name != "entities":
            continue
        with_graph, without = a["with graph"]["v3"], a["without graph"]["v3"]
        rows.append((f"v3 with vs without the graph ({name}), validation",
                     f"NDCG@10 {with_graph['ndcg@10']:.3f} vs {without['ndcg@10']:.3f}; Recall@10 "
                     f"{with_graph['recall@10']:.3f} vs {without['recall@10']:.3f}"))
    return rows


def compact_pass_rows(r: dict) -> Rows:
    before, after = r["before"], r["after"]
    return [("graph", f"the offline extractor's graph of {r['pairs']:,} oracle pairs ({r['questions']} questions, one user)"),
            ("subjects before → after", f"{before['subjects']:,} → {after['subjects']:,}"),
            ("generic subjects before → after", f"{before['generic_subjects']} → {after['generic_subjects']} "
             "(those left are protected: reinforced 5+ times)"),
            ("archived, by reason", "; ".join(f"{k}: {v}" for k, v in r["archived_by_reason"].items())),
            ("merged (variants of one name)", f"{r['merges']}: {', '.join(r['merge_examples'])}")]


def serve_rows(r: dict) -> Rows:
    def latency(cell: dict, kind: str) -> str:
        c = cell.get(kind)
        return f"{c['p50_ms']} / {c['p95_ms']} / {c['p99_ms']} ms" if c else "–"
    rows = [(name, f"{cell['requests_per_s']} requests/s · recall p50/p95/p99 {latency(cell, 'recall')} · save "
                   f"{latency(cell, 'save')} · errors {cell['errors']}") for name, cell in r["cells"].items()]
    rows += [(f"{name}: recall p50 against its statement's (the `query` stage of the same recalls)",
              f"{ratio['recall_p50_ms']} / {ratio['statement_p50_ms']} ms = ×{ratio['ratio']}")
             for name, ratio in r.get("one_client_recall_to_statement", {}).items()]
    profile = r.get("cpu_profile")
    if profile:
        samples = profile["service_samples"]
        rows += [(f"CPU ms a request, 8 HTTP clients on {profile['user']} (py-spy attached)",
                  " · ".join(f"{side} {ms}" for side, ms in profile["cpu_ms_per_request"].items())),
                 *([("requests/s the cores carry at that CPU", " · ".join(
                     f"{how} {rate}" for how, rate in profile["requests_per_s_the_cores_carry"].items()))]
                   if "requests_per_s_the_cores_carry" in profile else []),
                 ("the service's CPU by what spends it", " · ".join(
                     f"{kind} {share:.1%}" for kind, share in samples["by_what_spends"].items())),
                 ("the service's CPU by stage", " · ".join(
                     f"{stage} {share:.1%}" for stage, share in samples["by_stage"].items()))]
    return rows


def reliability_rows(r: dict) -> Rows:
    k, t, s = r["kill_9_mid_sync"], r["terminated_saves"], r["concurrent_savers"]
    o, b = r["llm_outage"], r["bulk_insert"]
    hang, trickle, stage = o["one_call_hang"], o["one_call_trickle"], o["extraction_stage_hanging_endpoint"]
    return [
        (f"kill -9 mid-sync ({k['kills']} kills, {k['users']} users; {k['killed_inside_a_write_transaction']} inside a "
         f"stage's write transaction, {k['killed_between_stages']} between two stages)",
         f"lost {k['lost_pairs']}, duplicate subjects {k['duplicate_subjects']}, duplicate links "
         f"{k['duplicate_links']}, orphans {k['orphan_pairs']}; graph equal to an uninterrupted run "
         f"{k['graphs_equal_to_uninterrupted']}/{k['kills']}"),
        ("4 syncs of one user at once", f"duplicate subjects {r['concurrent_syncs']['duplicate_subjects']}, "
         f"graph equal {r['concurrent_syncs']['graph_equals_uninterrupted']}"),
        (f"{s['savers']} concurrent savers, shuffled", f"{s['distinct']:,} of {s['pairs']:,} stored, {s['rows']:,} rows"),
        ("saving connection terminated mid-statement", f"{t['all_or_nothing']}/{t['saves']} all-or-nothing"),
        (f"{r['cross_tenant_recalls']['recalls']} random cross-tenant recalls",
         f"{r['cross_tenant_recalls']['leaks']} leaks in {r['cross_tenant_recalls']['memories_returned']:,} memories"),
        ("hostile records", f"{r['hostile_records']['rejected']} rejected by field, {r['hostile_records']['stored']} stored"),
        ("one LLM call, endpoint hangs", f"{hang['seconds']} s (deadline {hang['deadline_s']} s)"),
        ("one LLM call, endpoint trickles a byte at a time", f"{trickle['seconds']} s (deadline {trickle['deadline_s']} s)"),
        ("extraction of 40 pairs, endpoint hangs", f"{stage['seconds']} s, then stops ({stage['not_attempted']} calls not sent)"),
        (f"one INSERT of pairs for {b['users']:,} users", f"{b['seconds']} s, {b['users_indexed']:,} users indexed"),
        ("stored pair and live-subject counts after all of the above (migration 0024)",
         f"{r['stored_counts']['drifted']} of {r['stored_counts']['graphs']:,} graphs differ from a count")]


def render() -> str:
    """docs/benchmarks.md's text from the committed results and bench/report_layout.toml."""
    out = ["# Benchmarks", "",
           "Every figure the README and docs quote, generated from `bench/results/*.json` by `bench/report.py`; "
           "`make bench` reruns every benchmark and regenerates this page. Speed is measured here, never in "
           "timed tests; ratios are measured side by side in one run, because this machine is noisy.", ""]
    for spec in tomllib.loads(LAYOUT.read_text())["section"]:
        result = load(spec["result"])
        rows: Rows = []
        if result is not None:
            rows = (globals()[spec["builder"]](result) if "builder" in spec
                    else [(label.format_map(result), template.format_map(result)) for label, template in spec["rows"]])
        out += section(spec["title"], result, rows, spec.get("note", "").format_map(result or {}))
    return "\n".join(out)


# docs/performance.md: its tables are made here from the same result files, between these markers.
PERFORMANCE = ROOT / "docs" / "performance.md"
GENERATED = ("<!-- the tables below are made by bench/report.py from bench/results/*.json -->",
             "<!-- end of the tables made by bench/report.py -->")


def _ratio(value: float) -> str:
    return f"×{value:.2f}"


def headline_rows() -> list[tuple[str, str, str, str]]:
    """(what, command, result, result file) for each headline figure of docs/performance.md, from
    bench/report_layout.toml's [[headline]] entries."""
    rows = []
    for spec in tomllib.loads(LAYOUT.read_text())["headline"]:
        result = load(spec["result"])
        if result is not None:
            bench = spec.get("bench", spec["result"]).replace("_", "-")
            rows.append((spec["what"].format_map(result), f"`make bench-{bench}`", spec["figure"].format_map(result),
                         f"`{spec['result']}.json`"))
    return rows


def tuning_rows() -> list[tuple[str, str, str]]:
    """(to change, set, effect with its result file) for docs/performance.md's tuning table."""
    rows = []
    recall, workers, batches = load("recall"), load("extraction_workers"), load("embedding_batches")
    if recall is not None:
        sweep = recall["ef_search_sweep"]
        rows.append(("recall's vector-pool accuracy vs time", "`DREAMING_RECALL_EF_SEARCH` (200)",
                     f"ef_search 100 → 200: the pool holds {sweep['100']['pool_recall_mean']:.1%} → "
                     f"{sweep['200']['pool_recall_mean']:.1%} of the exact top-50 (`recall.json`)"))
        latency = recall["latency_heavy_user"]
        rows.append(("memory held for word postings per recall process", "`DREAMING_RECALL_LEXICAL_CACHE_MB`",
                     "0: the lexical pool is read from the word index (exact_lexical_top_k.sql): hybrid "
                     f"{_ratio(latency['ratio_hybrid_statement_pool_to_composite_p50'])} the cosine statement at p50, "
                     f"against {_ratio(latency['ratio_hybrid_to_composite_p50'])} with the cache (`recall.json`)"))
        compared = recall["shared_buffers"]
        rows.append(("Postgres memory for the embedded server", "`DREAMING_EMBEDDED_SHARED_BUFFERS` (auto)",
                     f"{compared['postgres_default']['shared_buffers']} instead of "
                     f"{compared['embedded_default']['shared_buffers']}: hybrid "
                     f"{_ratio(1 / compared['ratio_embedded_to_postgres_default_hybrid_p50'])} at p50, "
                     f"{_ratio(1 / compared['ratio_embedded_to_postgres_default_hybrid_p99'])} at p99 (`recall.json`)"))
    if workers is not None:
        kept = workers["variants"]["2 workers kept"]["time_vs_in_process"]
        rows.append(("parallel parsing for a backlog", "`DREAMING_LLM_OFFLINE_PROCESSES` (2)",
                     f"1: everything in the calling process ({_ratio(1 / kept)} the time of kept workers, "
                     "`extraction_workers.json`)"))
    if batches is not None:
        rows.append(("the local model's runtime", "`DREAMING_EMBEDDING_LOCAL_RUNTIME` (onnx)",
                     f"torch: the same vectors, {_ratio(1 / batches['one_pair_at_a_time']['onnx_to_torch'])} the time a "
                     f"pair, {_ratio(1 / batches['one_query']['onnx_to_torch'])} a recall query (`embedding_batches.json`)"))
    return rows


def performance_tables() -> str:
    """The generated part of docs/performance.md: the headline figures, the machine, what to tune."""
    lines = [GENERATED[0], "", "## The figures", "", "| what | command | result | result file |", "|---|---|---|---|",
             *[f"| {what} | {command} | {result} | {file} |" for what, command, result, file in headline_rows()], ""]
    recall = load("recall")
    if recall is not None:
        lines += ["## The machine", "",
                  f"Every result records the machine it ran on (`machine` in the file): {machine(recall)}. The embedded "
                  f"PostgreSQL 16 + pgvector 0.6 ran with `shared_buffers` {recall['data']['shared_buffers']} (a "
                  "quarter of the memory).", ""]
    lines += ["## What to tune", "", "| to change | set | effect (result file) |", "|---|---|---|",
              *[f"| {change} | {setting} | {effect} |" for change, setting, effect in tuning_rows()], "", GENERATED[1]]
    return "\n".join(lines)


def render_performance(page: str) -> str:
    """``page`` (docs/performance.md) with its generated part made anew."""
    start, end = page.index(GENERATED[0]), page.index(GENERATED[1]) + len(GENERATED[1])
    return page[:start] + performance_tables() + page[end:]


def refresh_citations() -> int:
    """Every figure README and docs cite by key path rewritten to its result file's value; how many changed."""
    changed = 0
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text, count = citations.refreshed(page.read_text(), page)
        if count:
            page.write_text(text)
            print(f"{page.relative_to(ROOT)}: {count} cited figure(s) rewritten")
        changed += count
    return changed


def main() -> None:
    (ROOT / "docs" / "benchmarks.md").write_text(render())
    PERFORMANCE.write_text(render_performance(PERFORMANCE.read_text()))
    changed = refresh_citations()
    print(f"wrote {ROOT / 'docs' / 'benchmarks.md'} and the tables of {PERFORMANCE}; {changed} cited figure(s) "
          "rewritten (read the sentences around them)")


if __name__ == "__main__":
    main()
