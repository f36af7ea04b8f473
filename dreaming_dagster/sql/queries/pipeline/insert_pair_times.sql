-- A batch's times (one row per mention; several per pair), from the dating stage (source 'text') or an
-- LLM extraction (source 'llm'). A re-run writes the same keys: nothing is duplicated.
INSERT INTO pair_times (pair_id, user_id, kg_id, source, position, expression, first_day, last_day, granularity,
                        certainty)
SELECT t.pair_id, %(user_id)s, %(kg_id)s, %(source)s, t.position, t.expression, t.first_day, t.last_day,
       t.granularity, t.certainty
FROM unnest(%(pair_ids)s::uuid[], %(positions)s::integer[], %(expressions)s::text[], %(first_days)s::date[],
            %(last_days)s::date[], %(granularities)s::text[], %(certainties)s::real[])
     AS t(pair_id, position, expression, first_day, last_day, granularity, certainty)
JOIN memory_pairs p ON p.id = t.pair_id AND p.user_id = %(user_id)s AND p.kg_id = %(kg_id)s
ON CONFLICT (pair_id, source, position) DO NOTHING;
