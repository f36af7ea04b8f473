-- One imported subject, as the export had it (its vector from this instance's embedder).
INSERT INTO subjects (user_id, kg_id, subject_text, description_text, subject_type, embedding, is_key_subject,
                      importance, created_at, last_seen_at, reinforcement_count, refined_at, pinned, archived_at,
                      archive_reason, hub_since)
VALUES (%(user_id)s, %(kg_id)s, %(name)s, %(description)s, %(type)s, %(embedding)s, %(key_subject)s, %(importance)s,
        %(created_at)s, %(last_seen_at)s, %(reinforcement_count)s, %(refined_at)s, %(pinned)s, %(archived_at)s,
        %(archive_reason)s, %(hub_since)s)
RETURNING id;
