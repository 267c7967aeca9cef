"""Memory formation, second half (memory/formation/admission.py is the first): reading the model's answer,
tying each candidate to the admitted lines it cites, checking that those lines support it
(memory/trust/grounding.py), folding duplicates, dropping what repeats an existing memory, the per-run
ceilings, and the records that come out. Pure, like the first half.

What a record says depends on whose words it stands on (DESIGN §6, §11). An owner assertion keeps
the model's compact statement: the person's own DM lines, paraphrased, waiting for that person's
review. Attributed communication never keeps the model's words: its record is the channel, the
speaker and a bounded verbatim excerpt of what they said, one record per cited line. The model's
statement only decides whether a line is worth keeping (and, by its type, as what kind), once the
grounding check found it supported by that line.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from memory.formation.admission import Admission, Conversation, Line, flat, text_problem
from memory.records.fields import NewRecord
from memory.records.model import MemoryClass, Provenance, ReviewStatus, Scope, ScopeKind, UsePolicy
from memory.trust import grounding, writeback

AUTHOR = "system:formation"  # the actor every formed record is written by
MAX_ATTRIBUTED = 20  # per run (DESIGN §6)
MAX_CANDIDATES = 32
MAX_CANDIDATE_CHARS = 400  # one compact statement
MAX_PARSED = 200  # candidates looked at in one answer: a runaway model must not cost unbounded work
FOLD_JACCARD = 0.8  # word-set overlap at which two statements of one scope say the same thing

KINDS = (
    "decision",
    "constraint",
    "preference",
    "fact",
    "lesson",
    "failure",
    "next_step",
    "open_question",
    "artifact",
    "note",
)
_KIND_RANK = {kind: n for n, kind in enumerate(KINDS)}
_KIND_ALIASES = {
    "environment": "fact",
    "environment_fact": "fact",
    "user_fact": "fact",
    "question": "open_question",
    "next": "next_step",
    "todo": "next_step",
    "artifact_reference": "artifact",
    "reference": "artifact",
    "error": "failure",
    "rule": "constraint",
}

# --- reading the model's answer --------------------------------------------------------------------


class Unparsable(ValueError):
    """The model answered, but not with the JSON it was asked for."""


@dataclass(frozen=True, slots=True)
class Candidate:
    kind: str
    text: str
    sources: tuple[int, ...]


_MAX_STARTS = 50
_FENCED = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.S)


def _document(answer: str) -> Any:
    text = answer.strip()
    fenced = _FENCED.search(text)
    if fenced:
        text = fenced.group(1).strip()
    decoder = json.JSONDecoder()
    for opening in ("{", "["):  # an object first: prose before it may hold brackets ("see [1]")
        starts = [m.start() for m in re.finditer(re.escape(opening), text)][:_MAX_STARTS]
        for at in starts:
            try:
                value, _end = decoder.raw_decode(text, at)
            except ValueError:
                continue
            if (isinstance(value, dict) and "candidates" in value) or isinstance(value, list):
                return value
    raise Unparsable("no JSON object in the answer")


def _kind(value: Any) -> str:
    if not isinstance(value, str):
        return "note"
    kind = re.sub(r"[\s-]+", "_", value.strip().casefold())
    kind = _KIND_ALIASES.get(kind, kind)
    if kind not in _KIND_RANK and kind.endswith("s"):
        kind = _KIND_ALIASES.get(kind[:-1], kind[:-1])
    return kind if kind in _KIND_RANK else "note"


def _numbers(value: Any) -> tuple[int, ...] | None:
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    for item in items:
        if isinstance(item, bool):
            return None
        if isinstance(item, int):
            out.append(item)
        elif isinstance(item, str) and item.strip().strip("[]#").isdigit():
            out.append(int(item.strip().strip("[]#")))
        else:
            return None
    return tuple(out)


def parse_answer(answer: str) -> tuple[list[Candidate], int]:
    """The candidates of a model's answer and how many of its items were malformed (or beyond
    MAX_PARSED). Unparsable when there is no candidate list at all."""
    if answer.strip().upper().rstrip(".") == "NONE":
        return [], 0
    document = _document(answer)
    if isinstance(document, dict):
        document = document.get("candidates")
    if not isinstance(document, list):
        raise Unparsable("the answer has no candidate list")
    found: list[Candidate] = []
    bad = max(0, len(document) - MAX_PARSED)
    for item in document[:MAX_PARSED]:
        if not isinstance(item, dict):
            bad += 1
            continue
        text = item.get("text")
        sources = _numbers(item.get("sources", item.get("source")))
        if not isinstance(text, str) or not text.strip() or not sources:
            bad += 1
            continue
        found.append(Candidate(_kind(item.get("type", item.get("kind"))), text, sources))
    return found, bad


# --- from candidates to records --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Proposal:
    """A candidate that passed: its scope and class, the lines and messages it stands on. `text` is
    what the record will say: the model's statement for an owner assertion, the verbatim excerpt of
    the one cited line for attributed communication."""

    kind: str
    text: str
    admission: Admission
    scope: Scope
    lines: tuple[int, ...]
    message_ids: tuple[int, ...]
    speakers: tuple[str, ...]  # for attributed communication: who said the cited lines
    order: int  # position in the model's answers, the last tie-break
    support: int = 1  # how many candidates stand behind it (folding adds them up)


def _framing(lines: Sequence[Line], conv: Conversation) -> list[str]:
    """How a statement may name who said the cited lines and where: never content it must find."""
    out = [conv.key]
    for ln in lines:
        src = ln.source
        out += [v for v in (src.author, src.name, src.user_id) if v]
        if src.author and ":" in src.author:
            out.append(src.author.split(":", 1)[1])  # "1002" of telegram:1002
    return out


def _fit(text: str, secrets: Sequence[str]) -> bool:
    return writeback.check(text, extra_secrets=secrets, sourced=True).action == "ok"


def propose(
    candidates: Sequence[Candidate],
    lines: Sequence[Line],
    conv: Conversation,
    *,
    secrets: Sequence[str] = (),
    start: int = 0,
) -> tuple[list[Proposal], Counter[str]]:
    """Candidates tied to the `lines` they were given, checked again with the same filters as the
    messages (a model may echo a phone number or an injection), plus the write-back filter, then
    for grounding in the lines they cite (`ungrounded` when they are not: see memory/trust/grounding.py);
    the proposals and how many candidates were dropped, by reason.

    An attributed candidate becomes one proposal per cited line that supports it (a line it cites
    but draws nothing from is not kept), each holding that line's excerpt."""
    by_number = {ln.number: ln for ln in lines}
    kept: list[Proposal] = []
    dropped: Counter[str] = Counter()
    for n, cand in enumerate(candidates):
        cited = [by_number.get(number) for number in sorted(set(cand.sources))]
        if not cited or any(ln is None for ln in cited):
            dropped["unknown_source"] += 1  # a number it was not given: made up, never trusted
            continue
        sources = [ln for ln in cited if ln is not None]
        problem = text_problem(cand.text, secrets, MAX_CANDIDATE_CHARS)
        if problem is None and not _fit(cand.text, secrets):
            problem = "unfit"  # a transcript, a scratchpad, a dump … or a flag the filter raised
        if problem is not None:
            dropped[problem] += 1
            continue
        owner = all(ln.admission == Admission.OWNER for ln in sources) and conv.owner is not None
        support = grounding.ground(cand.text, [ln.source.content for ln in sources], _framing(sources, conv))
        if not support.holds(grounding.OWNER_COVERAGE if owner else grounding.ATTRIBUTED_COVERAGE):
            dropped["ungrounded"] += 1
            continue
        if owner:
            text = flat(writeback.clean(cand.text))  # checked with its lines, stored as one
            numbers = tuple(ln.number for ln in sources)
            ids = tuple(ln.source.id for ln in sources)
            kept.append(
                Proposal(cand.kind, text, Admission.OWNER, Scope.personal(str(conv.owner)), numbers, ids, (), start + n)
            )
            continue
        said = [
            ln
            for ln, holds in zip(sources, support.supporting, strict=True)
            if holds and _fit(ln.source.content, secrets)
        ]
        if not said:
            dropped["unfit"] += 1
            continue
        for ln in said:
            excerpt = grounding.excerpt(writeback.clean(ln.source.content), cand.text)
            kept.append(
                Proposal(
                    cand.kind,
                    excerpt,
                    Admission.ATTRIBUTED,
                    Scope(ScopeKind.PROJECT, conv.project) if conv.project else Scope.channel(conv.key),
                    (ln.number,),
                    (ln.source.id,),
                    (ln.source.speaker,),
                    start + n,
                )
            )
    return kept, dropped


_WORD = re.compile(r"[\w']+")
_NEGATIONS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without", "cannot"})


@dataclass(frozen=True, slots=True)
class _Gist:
    """What similar() compares of a text, computed once per text (a run compares each candidate
    with up to EXISTING_PER_SCOPE records: recomputing it per pair cost 15 ms a job)."""

    words: frozenset[str]
    negated: bool


@functools.lru_cache(maxsize=8192)  # the same existing records are compared again by every run
def _gist(text: str) -> _Gist:
    folded = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    words = frozenset(_WORD.findall(folded))
    return _Gist(words, any(w in _NEGATIONS or w.endswith("n't") for w in words))


def _same(a: _Gist, b: _Gist) -> bool:
    if not a.words or not b.words:
        return False
    if a.words == b.words:
        return True
    if a.negated != b.negated:
        return False
    small, big = sorted((len(a.words), len(b.words)))
    if small < FOLD_JACCARD * big:  # the overlap could not reach the threshold: skip the set work
        return False
    return len(a.words & b.words) / len(a.words | b.words) >= FOLD_JACCARD


def similar(a: str, b: str) -> bool:
    """Do two statements say the same thing? The same words, or word sets overlapping by at least
    FOLD_JACCARD (Jaccard), unless only one of them is negated: "X is on Friday" and "X is not on
    Friday" overlap a lot and mean the opposite."""
    return _same(_gist(a), _gist(b))


def _fold_into(kept: Proposal, other: Proposal) -> Proposal:
    # An owner assertion keeps the fuller statement; an excerpt the first cut (both are the speaker's words).
    owner = kept.admission == Admission.OWNER
    text = other.text if owner and len(other.text) > len(kept.text) else kept.text
    return replace(
        kept,
        text=text,
        lines=tuple(sorted(set(kept.lines) | set(other.lines))),
        message_ids=tuple(sorted(set(kept.message_ids) | set(other.message_ids))),
        speakers=tuple(dict.fromkeys(kept.speakers + other.speakers)),
        support=kept.support + other.support,
    )


def _folds(a: Proposal, gist_a: _Gist, b: Proposal, gist_b: _Gist) -> bool:
    """Do two proposals of one run say the same thing? Owner statements when similar(); excerpts
    when they quote the same message, or the same words (two people who said exactly that)."""
    if a.scope != b.scope or a.admission != b.admission:
        return False
    if a.admission == Admission.OWNER:
        return _same(gist_a, gist_b)
    return a.message_ids == b.message_ids or a.text.casefold() == b.text.casefold()


def fold(proposals: Sequence[Proposal]) -> tuple[list[Proposal], int]:
    """Duplicates of one scope folded into one (see _folds; the sources of both); the rest in
    order, and how many were folded away."""
    kept: list[Proposal] = []
    gists: list[_Gist] = []
    folded = 0
    for proposal in proposals:
        gist = _gist(proposal.text)
        for i, existing in enumerate(kept):
            if _folds(existing, gists[i], proposal, gist):
                kept[i] = _fold_into(existing, proposal)
                gists[i] = _gist(kept[i].text)
                folded += 1
                break
        else:
            kept.append(proposal)
            gists.append(gist)
    return kept, folded


def _rank(proposal: Proposal) -> tuple[int, int, int, int, int]:
    """Owner assertions first, then what more candidates and lines stand on, then by kind, then
    answer order."""
    owner = 0 if proposal.admission == Admission.OWNER else 1
    kind = _KIND_RANK.get(proposal.kind, len(KINDS))
    return owner, -proposal.support, -len(proposal.lines), kind, proposal.order


@dataclass(frozen=True, slots=True)
class Limits:
    max_candidates: int = MAX_CANDIDATES
    max_attributed: int = MAX_ATTRIBUTED


@dataclass(frozen=True, slots=True)
class Plan:
    kept: list[Proposal]
    dropped: Counter[str] = field(default_factory=Counter)


def plan(proposals: Sequence[Proposal], existing: Mapping[str, Sequence[str]], limits: Limits = Limits()) -> Plan:
    """What a run writes: duplicates folded first, then whatever repeats an existing memory of its
    scope (`existing`: scope → texts of its active records) dropped, then ranked and cut to the
    ceilings (at most `max_attributed` attributed and `max_candidates` in all)."""
    dropped: Counter[str] = Counter()
    folded, n_folded = fold(proposals)
    if n_folded:
        dropped["folded"] += n_folded
    fresh: list[Proposal] = []
    known: dict[str, list[_Gist]] = {}
    for proposal in folded:
        scope = str(proposal.scope)
        if scope not in known:
            known[scope] = [_gist(text) for text in existing.get(scope, ())]
        gist = _gist(proposal.text)
        if any(_same(gist, old) for old in known[scope]):
            dropped["known"] += 1
        else:
            fresh.append(proposal)
    kept: list[Proposal] = []
    attributed = 0
    for proposal in sorted(fresh, key=_rank):
        is_attributed = proposal.admission == Admission.ATTRIBUTED
        if len(kept) >= limits.max_candidates or (is_attributed and attributed >= limits.max_attributed):
            dropped["ceiling"] += 1
            continue
        kept.append(proposal)
        attributed += is_attributed
    return Plan(kept, dropped)


def _ranges(ids: Sequence[int]) -> str:
    """12,13,14,19 → "12-14,19"."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(set(ids)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def _said_in(attribution: str, conversation: str) -> str:
    return f"{attribution} said in {conversation}: "


def statement(content: str, attribution: str | None, conversation: str) -> str:
    """The statement of a record as formation wrote it, without its attribution: what a new
    candidate is compared with. For attributed communication, the excerpt without its quotes
    (records written before excerpts, with the model's statement after the colon, read the same)."""
    if attribution:
        head = _said_in(attribution, conversation)
        if content.startswith(head):
            said = content[len(head) :]
            return said[1:-1] if len(said) >= 2 and said[0] == said[-1] == '"' else said
    return content


def source_prefix(job_id: int) -> str:
    """How every record a job wrote begins its `source`: a re-run finds them by it."""
    return f"formation:job-{job_id} "


_EVIDENCE = UsePolicy(
    can_use_as_instruction=False,
    can_use_as_evidence=True,
    requires_user_confirmation=True,
    do_not_inject_automatically=False,
)


def to_record(proposal: Proposal, conv: Conversation, job_id: int) -> NewRecord:
    """The new record: inferred evidence (it expires with its class, after 30 days) waiting for
    review; attributed communication is also sensitive and says who said what, where, in their
    words: `Bob (telegram:1002) said in telegram:group:-100: "The Friday demo moved to 3pm"`."""
    source = f"{source_prefix(job_id)}msgs {_ranges(proposal.message_ids)}"
    content, attribution, sensitivity = proposal.text, None, "normal"
    if proposal.admission == Admission.ATTRIBUTED:
        # Cut to the column's size before it heads the content, so statement() still finds it.
        attribution = ", ".join(proposal.speakers)[:255]
        content = f'{_said_in(attribution, conv.key)}"{proposal.text}"'
        source = f"{source} of {conv.key}"
        sensitivity = "sensitive"
    return NewRecord(
        content=content,
        memory_class=MemoryClass.EVIDENCE,
        provenance=Provenance.INFERRED,
        use_policy=_EVIDENCE,
        scope=proposal.scope,
        author=AUTHOR,
        review_status=ReviewStatus.PENDING,
        sensitivity=sensitivity,
        source=source[:512],
        attribution=attribution or None,
        origin_audience=conv.audience,
        tags=("formation", proposal.kind),
    )
