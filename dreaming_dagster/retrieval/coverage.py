"""Coverage for questions that gather: "how many … in total", "all the …", "which did I … first".

Such a question is answered by several sessions, and its best-scored pairs are often near-copies from one
of them. For these questions recall keeps the top k from collapsing onto one session: walking the ranking,
a pair whose session already holds ``per_session`` of the top k waits until every other candidate has had
its turn (the order inside each group stays the ranker's). Other questions keep the ranker's order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Words of a question that asks for every instance, a total or an order between events.
GATHERING = re.compile(
    r"\b(how many|how much|in total|total|altogether|combined|all (?:the|of)|which .{0,60}\bfirst)\b",
    re.IGNORECASE)
DEFAULT_PER_SESSION = 3  # chosen on the dev questions (make bench-longmemeval: 1, 2 and 3 compared)


def gathers(query: str, question_type: str | None) -> bool:
    """Whether a question needs several sessions: a multi-session question, or one using gathering words."""
    return question_type == "multi-session" or bool(GATHERING.search(query))


def spread_over_sessions(sessions: Sequence[str | None], k: int, per_session: int = DEFAULT_PER_SESSION) -> list[int]:
    """Positions of a ranked list re-ordered so its first ``k`` hold at most ``per_session`` pairs of one
    session while other sessions have candidates left; the rest follow in their order."""
    if per_session < 1:
        raise ValueError("per_session must be at least 1")
    taken: dict[str | None, int] = {}
    top, waiting = [], []
    for position, session in enumerate(sessions):
        if len(top) < k and (session is None or taken.get(session, 0) < per_session):
            top.append(position)
            taken[session] = taken.get(session, 0) + 1
        else:
            waiting.append(position)
    return top + waiting
