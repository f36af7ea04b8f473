-- The audit row of one pass.
INSERT INTO dreaming_passes (user_id, kg_id, mode, provider, status, started_at, input_tokens, tokens_consumed,
                             applied, skipped, failed, decayed, mutations, summary, error)
VALUES (%(user_id)s, %(kg_id)s, %(mode)s, %(provider)s, %(status)s, %(started_at)s, %(input_tokens)s,
        %(tokens_consumed)s, %(applied)s, %(skipped)s, %(failed)s, %(decayed)s, %(mutations)s, %(summary)s, %(error)s)
RETURNING id;
