"""Hubs and how specific a subject is: the rule that keeps a subject linked to most of a user's pairs (a
speaker's name in a chat log, "the user") from dominating the graph signals. Pure functions; the SQL of
``retrieval/composite_ranking.sql`` and ``pipeline/flag_hubs.sql`` states the same rule (tests compare).

A subject's *specificity* is an IDF over the user's pairs, scaled to [0, 1]: ln(N / n) / ln(N) for a
subject linked to n of the user's N pairs — 1 for a subject of one pair, falling to 0 for one on every
pair. A *hub* links more than ``share`` of the pairs once the user has ``min_pairs``; its specificity is 0,
so it adds nothing to ``subj_freq``, ``subj_sem`` or ``neighbor_density``, and it draws no graph
candidates. Hubs stay in the graph, browsable, flagged (``subjects.hub_since``) and listed by
``dreaming stats`` and the ``no_unflagged_hubs`` check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class HubRule:
    # A quarter: the main topic of a small memory ("BBQ" on 10 of 95 pairs) is a subject, not a hub; a
    # speaker's name on every turn is a hub at any size.
    share: float = 0.25
    min_pairs: int = 50  # below this, shares are noise: three pairs of twenty is no hub

    def __post_init__(self) -> None:
        if not 0 < self.share <= 1:
            raise ValueError(f"hub share must be in (0, 1], got {self.share}")
        if self.min_pairs < 1:
            raise ValueError(f"hub min_pairs must be ≥ 1, got {self.min_pairs}")

    def is_hub(self, linked_pairs: int, user_pairs: int) -> bool:
        return user_pairs >= self.min_pairs and linked_pairs > self.share * user_pairs

    def specificity(self, linked_pairs: int, user_pairs: int) -> float:
        """ln(N/n)/ln(N) in [0, 1]; 0 for a hub; 1 while the user has fewer than two pairs."""
        if self.is_hub(linked_pairs, user_pairs):
            return 0.0
        if user_pairs < 2:
            return 1.0
        return min(max(math.log(user_pairs / max(linked_pairs, 1)) / math.log(user_pairs), 0.0), 1.0)

    @classmethod
    def from_settings(cls, settings) -> HubRule:
        return cls(share=settings.graph_hub_share, min_pairs=settings.graph_hub_min_pairs)


DEFAULT_HUB_RULE = HubRule()
# The mega-node alarm (the reference's inverted-threshold bug showed up as one subject linked to
# everything): once a user has 50 pairs, a subject over half of them means merging went wrong, hub or not.
MEGA_NODE_MIN_PAIRS = 50
MEGA_NODE_MAX_SHARE = 0.5
