"""The ranker domain: LongMemEval memory and pools, ranker training and evaluation, train_ranker_job."""
