"""Who proposes a pass's mutations: an LLM through any OpenAI-compatible endpoint (prompted by a directive
file), or the deterministic offline rules."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, Field

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.consolidation.inputs import PassInput
from dreaming_dagster.consolidation.mutations import MUTATION_MODELS
from dreaming_dagster.consolidation.rules import (
    Protection,
    contained_name_merges,
    is_protected,
    junk_reason,
    merge_drops_identity,
    variant_key,
)
from dreaming_dagster.extraction.entities import clause_pieces
from dreaming_dagster.extraction.normalize import normalize_subject_name
from dreaming_dagster.llm.client import JSONChatClient
from dreaming_dagster.llm.schemas import flat_union_model, strict_schema
from dreaming_dagster.prompts import load_prompt


class Proposal(BaseModel):
    # Any JSON values: an entry that is not a mutation object is rejected on its own by parse_mutations,
    # never the whole answer.
    mutations: list[Any] = Field(default_factory=list)
    summary: str = ""


class Consolidator(Protocol):
    provider: str

    def propose(self, pass_input: PassInput) -> Proposal: ...


# ------------------------------------------------------------------------------------------------ offline
class OfflineConsolidator:
    """Deterministic rules: merge subjects whose names are variants of one name (case, markdown,
    possessive, a regular plural: "Avery", "Avery's", "**Avery**"; "Dog", "Dogs"), merge a name into the one
    longer name of the same named type that contains it when they share pairs ("Rachel" into "Rachel
    Green"), merge near-identical ones
    (cosine ≥ 0.95) when no name token of identity is lost, and archive, restorably and with the reason,
    names the offline extractor would never produce — fragments, markdown artifacts, stop-words, generic
    words ("Wow", "Plan", "Great List") and clause pieces ("Bowl Is Gorgeous") — when not protected, so a
    graph built before the extractor improved gets cleaned by a pass."""

    provider = "offline"

    def __init__(self, merge_similarity: float = 0.95, protection: Protection | None = None):
        self.merge_similarity, self.protection = merge_similarity, protection or Protection()

    def propose(self, pass_input: PassInput) -> Proposal:
        subjects = [s for s in pass_input.subjects if not s.get("pinned")]
        mutations: list[dict] = []
        merged: set[str] = set()
        merges, archives = [], []
        by_name: dict[str, list[dict]] = {}
        for subject in subjects:
            key = variant_key(subject["subject_text"])
            if key:
                by_name.setdefault(key, []).append(subject)
        for group in by_name.values():
            if len(group) < 2:
                continue
            key = variant_key(group[0]["subject_text"])

            def preference(s: dict, key: str = key) -> tuple:
                # The clean singular name first ("Dog", not "Dogs" or "**Dog**"), then any clean name, then age.
                clean_name = normalize_subject_name(s["subject_text"])
                return (s["subject_text"] != clean_name, clean_name.casefold() != key, s["created_at"], s["id"])
            target = min(group, key=preference)
            clean = normalize_subject_name(target["subject_text"])
            sources = [s for s in group if s is not target]
            mutations.append({"op": "merge_subjects", "sources": [s["id"] for s in sources], "target": target["id"],
                              "reason": "variants of one name (case, markdown, possessive or plural)"})
            if target["subject_text"] != clean:
                mutations.append({"op": "rename_subject", "subject": target["id"], "name": clean,
                                  "reason": "normalized name"})
            merged |= {s["id"] for s in group}
            merges.append(f"{', '.join(s['subject_text'] for s in sources)} → {clean}")
        by_target: dict[str, list[dict]] = {}
        for short, long in contained_name_merges([s for s in subjects if s["id"] not in merged]):
            by_target.setdefault(long["id"], [long]).append(short)
        for target, *sources in by_target.values():
            mutations.append({"op": "merge_subjects", "sources": [s["id"] for s in sources], "target": target["id"],
                              "reason": "a name inside a longer name of the same "
                                        f"{target['subject_type']}, named in the same conversations"})
            merged |= {target["id"], *(s["id"] for s in sources)}
            merges.append(f"{', '.join(s['subject_text'] for s in sources)} → {target['subject_text']}")
        rest = [s for s in subjects if s["id"] not in merged and s["embedding"] is not None]
        if len(rest) > 1:
            vectors = np.stack([np.asarray(s["embedding"], np.float32) for s in rest])
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            similarity = vectors @ vectors.T
            for i, j in sorted(zip(*np.nonzero(np.triu(similarity >= self.merge_similarity, 1)), strict=True),
                               key=lambda ij: -similarity[ij]):
                a, b = rest[i], rest[j]
                if a["id"] in merged or b["id"] in merged:
                    continue
                target, source = (a, b) if (a["link_count"], b["id"]) >= (b["link_count"], a["id"]) else (b, a)
                if merge_drops_identity(target["subject_text"], [(source["subject_text"], source["subject_type"])]):
                    continue
                mutations.append({"op": "merge_subjects", "sources": [source["id"]], "target": target["id"],
                                  "reason": f"near-identical (cosine {similarity[i, j]:.3f})"})
                merged |= {a["id"], b["id"]}
                merges.append(f"{source['subject_text']} → {target['subject_text']}")
        candidates = [s for s in subjects if s["id"] not in merged and not is_protected(s, self.protection)]
        pieces = clause_pieces([s["subject_text"] for s in candidates])
        for subject in candidates:
            reason = junk_reason(subject["subject_text"]) or (
                "a clause piece, not a subject" if subject["subject_text"] in pieces else None)
            if reason:
                mutations.append({"op": "archive_subject", "subject": subject["id"], "reason": f"junk: {reason}"})
                archives.append(subject["subject_text"])
        summary = (f"Offline pass over {len(pass_input.subjects)} subjects ({pass_input.label}): "
                   f"{len(merges)} merge(s){': ' + '; '.join(merges[:5]) if merges else ''}; "
                   f"{len(archives)} archived as junk{': ' + ', '.join(archives[:5]) if archives else ''}.")
        return Proposal(mutations=mutations, summary=summary)


# ------------------------------------------------------------------------------------------------- openai
def proposal_schema() -> dict:
    """Strict-mode JSON schema, derived from the mutation models: one flat object shape for every op
    (strict mode has no tagged unions), unused fields null."""
    item = strict_schema(flat_union_model("Mutation", MUTATION_MODELS, tag="op"))
    return {"type": "object", "additionalProperties": False, "required": ["mutations", "summary"],
            "properties": {"mutations": {"type": "array", "items": item}, "summary": {"type": "string"}}}


@cache
def _directive(path: str | None) -> str:
    if path:
        return Path(path).read_text(encoding="utf-8").strip()
    return load_prompt("dream")


class OpenAIConsolidator:
    provider = "openai"

    def __init__(self, client: JSONChatClient, directive_path: Path | None = None):
        self.client, self.directive_path = client, directive_path

    def propose(self, pass_input: PassInput) -> Proposal:
        messages = [{"role": "system", "content": _directive(str(self.directive_path) if self.directive_path else None)},
                    {"role": "user", "content": pass_input.render()}]
        proposal = self.client.ask(messages, Proposal, "dreaming_pass", proposal_schema())
        # Strict schemas send every field; drop the nulls so each mutation validates as its own op.
        proposal.mutations = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m
                              for m in proposal.mutations]
        return proposal


def consolidator_from_settings(settings: DreamingSettings) -> Consolidator:
    if settings.resolved_llm_provider == "openai":
        from dreaming_dagster.llm.client import chat_client

        return OpenAIConsolidator(chat_client(settings, max_tokens=4000), settings.dream_directive_path)
    return OfflineConsolidator()
