-- After the swap: the retrieval profiles' subject centroids were averages of the old model's vectors.
-- Recreate the column with the new dimension and recompute every centroid from the new vectors.
ALTER TABLE recall_profiles DROP COLUMN IF EXISTS subject_centroid;
ALTER TABLE recall_profiles ADD COLUMN subject_centroid vector({{ embedding_dimension }});
UPDATE recall_profiles rp
SET subject_centroid = (SELECT avg(s.embedding) FROM subjects s
                        WHERE s.user_id = rp.user_id AND s.kg_id = rp.kg_id
                          AND s.archived_at IS NULL AND s.embedding IS NOT NULL),
    refreshed_at = now(), centroid_at = now();
