"""The mutations a consolidation pass may propose, parsed and checked one by one.

Parsing is structural (pydantic): a malformed entry is rejected with its reason and never blocks the rest.
Checking against the user's live graph (ids, protection, names, identity tokens) happens in
:mod:`.apply`, in order, so later mutations see the effect of earlier ones.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from dreaming_dagster.storage.storable import clean_json


class _Mutation(BaseModel):
    model_config = {"extra": "ignore"}

    def describe(self) -> str:
        return self.model_dump_json()


class MergeSubjects(_Mutation):
    op: Literal["merge_subjects"]
    sources: list[str] = Field(min_length=1)
    target: str
    reason: str = ""


class RenameSubject(_Mutation):
    op: Literal["rename_subject"]
    subject: str
    name: str = Field(min_length=1, max_length=200)
    reason: str = ""


class UpdateDescription(_Mutation):
    op: Literal["update_description"]
    subject: str
    description: str = Field(max_length=4000)


class ArchiveSubject(_Mutation):
    op: Literal["archive_subject"]
    subject: str
    reason: str = Field(min_length=1)


class SupersedeSubject(_Mutation):
    op: Literal["supersede_subject"]
    old: str
    new: str
    reason: str = ""


class CreateSubject(_Mutation):
    op: Literal["create_subject"]
    name: str = Field(min_length=1, max_length=200)
    type: str = "other"
    description: str = Field(default="", max_length=4000)


MUTATION_MODELS = (MergeSubjects, RenameSubject, UpdateDescription, ArchiveSubject, SupersedeSubject, CreateSubject)
Mutation = Annotated[MergeSubjects | RenameSubject | UpdateDescription | ArchiveSubject | SupersedeSubject |
                     CreateSubject, Field(discriminator="op")]
_ADAPTER: TypeAdapter = TypeAdapter(Mutation)
OPS = ("merge_subjects", "rename_subject", "update_description", "archive_subject", "supersede_subject",
       "create_subject")


def parse_mutations(raw: object) -> tuple[list[_Mutation], list[dict]]:
    """(valid mutations in order, rejected entries as {"mutation", "reason"})."""
    if not isinstance(raw, list):
        return [], [{"mutation": raw, "reason": "mutations must be a JSON list"}]
    valid, rejected = [], []
    for entry in raw:
        entry = clean_json(entry)  # whichever provider proposed it, the graph stores only storable text
        try:
            valid.append(_ADAPTER.validate_python(entry))
        except ValidationError as error:
            first = error.errors()[0]
            rejected.append({"mutation": entry, "reason": f"{'.'.join(map(str, first['loc']))}: {first['msg']}"})
    return valid, rejected
