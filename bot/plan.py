"""Reading a tiered optimization plan out of an issue body.

Two shapes are understood, both parsed with markdown-it-py (CommonMark + GFM tables):

* the seed issue's: a ``# | File:Line | Change | Expected win`` table under a "Performance fixes (apply
  unconditionally)" line, a "Behavioral changes" table that is listed and never applied, a "Success criteria"
  list and a "Known issues flagged for follow-on" list of ``Tier N (a, b, c)`` entries;
* headings ``## Tier N`` with bullet items, each optionally naming optimizations as ``opt:<id>``.

Each item is matched to registered optimizations by explicit ``opt:<id>`` tokens or, failing that, by the
optimizations' keywords. Items nothing matches are kept and reported as needing a human.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypedDict

from markdown_it import MarkdownIt
from markdown_it.token import Token

from optimizations.registry import Optimization

EXPECTED_SHAPE = (
    "expected a markdown table with columns '# | File:Line | Change | Expected win' under a "
    "'Performance fixes' or 'Tier N' line, or '## Tier N' headings followed by bullet items "
    "(optionally naming optimizations as opt:<id>)"
)

_TIER = re.compile(r"\btier[\s-]*(\d+)\b", re.IGNORECASE)
_EXPLICIT = re.compile(r"\bopt:([a-z0-9_]+)", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
_LOCATION = re.compile(r"([\w./-]+\.(?:py|ya?ml|toml|json|cfg|ini)):(\d+)")
_PERCENT = re.compile(r"([+-]|±)?\s*(\d+(?:\.\d+)?)\s*%")
_NO_CRASH = re.compile(r"\b(?:no|zero|without)\b.{0,20}\b(?:crash|crashes|crashing|oom|ooms|failures?)\b")
_ALL_APPLIED = re.compile(r"\ball\b.{0,30}\b(?:applied|landed|committed)\b")


class PlanError(ValueError):
    """The text holds no plan the bot can read; the message says what was expected."""


@dataclass(frozen=True)
class PlanItem:
    """One row of the plan."""

    key: str
    tier: int
    change: str
    location: str = ""
    expected: str = ""
    optimizations: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()  # why each of ``optimizations`` matched, in the same order
    # Ids of ``optimizations`` matched only by a capability in plain words ("fused attention"): alternatives
    # that the repository decides between (:func:`bot.hints.choose_by_sites`).
    alternatives: tuple[str, ...] = ()
    auto_apply: bool = True
    why_not: str = ""
    follow_on: bool = False
    # A change that needs restructuring, proposed to a person: listed, never applied (``auto_apply`` is False).
    proposal: bool = False

    @property
    def target_hint(self) -> tuple[str, int] | None:
        """``(file, line)`` of the first ``file.py:123`` in the location (or change) text."""
        hints = self.target_hints
        return hints[0] if hints else None

    @property
    def target_hints(self) -> tuple[tuple[str, int], ...]:
        """Every ``(file, line)`` the location names (``a.py:3 and b.py:9``), else those of the change text."""
        found = _LOCATION.findall(self.location) or _LOCATION.findall(self.change)
        return tuple(dict.fromkeys((path, int(line)) for path, line in found))

    @property
    def needs_human(self) -> bool:
        return self.auto_apply and not self.optimizations


THROUGHPUT, LOSS, STABILITY, APPLIED, MANUAL = "throughput", "loss", "stability", "applied", "manual"


@dataclass(frozen=True)
class Criterion:
    """A success criterion, with the whole sentence it came from.

    ``kind``: ``throughput`` (a minimum gain for a workload), ``loss`` (a tolerance at equal tokens),
    ``stability`` (no crashed or OOM runs), ``applied`` (every item of the tier landed), or ``manual`` (kept,
    but not machine-checkable). ``tier``: the tier the plan's title names (its criteria are that tier's), else
    None (every tier's).
    """

    text: str
    kind: str
    threshold: float | None = None  # fraction: 0.30 for +30%, 0.05 for ±5%
    workload: str | None = None
    tier: int | None = None

    @property
    def checkable(self) -> bool:
        """False for a criterion only a person can judge."""
        return self.kind != MANUAL


@dataclass
class Plan:
    """Items, success criteria and follow-ons of one plan."""

    title: str
    items: list[PlanItem]
    criteria: list[Criterion] = field(default_factory=list)
    source: str = ""

    def tier(self, tier: int) -> list[PlanItem]:
        """The items of one tier that may be applied (behavioural ones excluded)."""
        return [i for i in self.items if i.tier == tier and i.auto_apply]

    @property
    def behavioural(self) -> list[PlanItem]:
        """Items listed and never applied (behavioural changes, refused sites), proposals aside."""
        return [i for i in self.items if not i.auto_apply and not i.proposal]

    @property
    def proposals(self) -> list[PlanItem]:
        """Changes that need restructuring, proposed to a person: never applied."""
        return [i for i in self.items if i.proposal]

    @property
    def unmatched(self) -> list[PlanItem]:
        return [i for i in self.items if i.needs_human]

    @property
    def loss_tolerance(self) -> float | None:
        return next((c.threshold for c in self.criteria if c.kind == LOSS), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "source": self.source,
            "items": [
                asdict(i) | {"target_hint": i.target_hint, "needs_human": i.needs_human} for i in self.items
            ],
            "criteria": [asdict(c) for c in self.criteria],
        }


def clean(text: str) -> str:
    """Drop HTML comments and invisible format characters (zero-width, bidi controls) from an issue body."""
    text = re.sub(r"<!--.*?(?:-->|\Z)", "", text, flags=re.DOTALL)
    return "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) not in ("Cf", "Cc", "Co"))


def words(text: str) -> list[str]:
    """The text's words, lower-cased and reduced to a crude stem, identifiers split at underscores:
    ``dataloader_num_workers`` → ``dataloader num worker``, ``precomputed`` → ``precomput``."""
    return [_stem(word) for word in _WORD.findall(text.lower())]


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) > len(suffix) + 3 and not word.endswith("ss"):
            stem = word[: -len(suffix)]
            doubled = len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "aeioulsz"
            return stem[:-1] if doubled else stem  # "pinned" → "pin", "stopped" → "stop"
    return word


def _vocabulary(text: str) -> set[str]:
    """The stems of a text plus each pair of neighbours written as one word, so "data loader" also reads as
    "dataloader" and "flash attention" as "flashattention"."""
    stems = words(text)
    return set(stems) | {first + second for first, second in zip(stems, stems[1:], strict=False)}


def _says(vocabulary: set[str], phrases: Iterable[str]) -> str | None:
    """The first phrase whose word stems all occur in the vocabulary, in any order."""
    return next((p for p in phrases if (stems := words(p)) and all(s in vocabulary for s in stems)), None)


def match_optimizations(text: str, optimizations: Iterable[Optimization]) -> tuple[tuple[str, str], ...]:
    """``(id, reason)`` for each optimization the text names: explicitly as ``opt:<id>`` (then only those), or
    by one of its keyword phrases, matched on word stems in any order ("turn on sample packing" names
    ``packing``; "add data loader workers" names ``dataloader_workers``), or by a capability in plain words
    that several optimizations share ("fused attention": ``fa2`` and ``sdpa``), unless a keyword already named
    one of those (see :func:`alternatives`)."""
    known = {o.id: o for o in optimizations}
    explicit = [m.lower() for m in _EXPLICIT.findall(text)]
    if explicit:
        return tuple((i, f"the text names opt:{i}") for i in dict.fromkeys(explicit) if i in known)
    vocabulary = _vocabulary(text)
    found = {}
    for optimization in known.values():
        if phrase := _says(vocabulary, optimization.keywords):
            found[optimization.id] = f'the text says "{phrase}"'
    for optimization in known.values():
        phrase = _says(vocabulary, optimization.capabilities)
        sharing = [o.id for o in known.values() if phrase in o.capabilities] if phrase else []
        if phrase and not any(i in found for i in sharing):
            for other in sharing:
                found.setdefault(other, f'the text asks for "{phrase}"')
    return tuple(found.items())


def unknown_optimizations(text: str, known: Iterable[str]) -> dict[str, list[str]]:
    """Each ``opt:<id>`` the issue body names (outside HTML comments) that is not in ``known``, with the known
    ids closest to it in spelling (``packign``: ``packing``), closest first."""
    known = list(known)
    named = dict.fromkeys(m.lower() for m in _EXPLICIT.findall(clean(text)))
    return {i: difflib.get_close_matches(i, known, n=3, cutoff=0.6) for i in named if i not in known}


def alternatives(reasons: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The ids matched by a capability only, which the repository decides between."""
    return tuple(i for i, reason in reasons if reason.startswith("the text asks for"))


class Matches(TypedDict):
    """The optimizations a plan item's text matched: :class:`PlanItem`'s fields of the same names."""

    optimizations: tuple[str, ...]
    reasons: tuple[str, ...]
    alternatives: tuple[str, ...]


# A behavioural item is matched to nothing: PlanItem's defaults.
NO_MATCHES = Matches(optimizations=(), reasons=(), alternatives=())


def _matched(text: str, optimizations: Iterable[Optimization]) -> Matches:
    """``optimizations``, ``reasons`` and ``alternatives`` for a :class:`PlanItem`."""
    pairs = match_optimizations(text, optimizations)
    return Matches(
        optimizations=tuple(i for i, _ in pairs),
        reasons=tuple(r for _, r in pairs),
        alternatives=alternatives(pairs),
    )


def parse_plan(text: str, optimizations: Iterable[Optimization], source: str = "") -> Plan:
    """Parse an issue body into a :class:`Plan`; raise :class:`PlanError` when there is none."""
    optimizations = list(optimizations)
    tokens = MarkdownIt("commonmark").enable("table").parse(clean(text))
    title = ""
    items: list[PlanItem] = []
    criteria: list[Criterion] = []
    context = ""  # the caption (heading, paragraph or caption line) that governs the current block
    heading_tier: int | None = None
    document_tier: int | None = None
    list_depth = 0
    already_done = 0  # the entries of a drafted plan's "Already done" and "Kept" lists
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type in ("bullet_list_open", "ordered_list_open"):
            list_depth += 1
        elif token.type in ("bullet_list_close", "ordered_list_close"):
            list_depth -= 1
        elif token.type == "list_item_open":
            end = _block_end(tokens, i)
            text_lines, caption = _item_text(
                tokens[i:end], folded=list_depth == 1 and heading_tier is not None
            )
            entry = " ".join(text_lines).strip()
            lowered = context.lower()
            if entry and "success criteria" in lowered:
                # GitHub renders each line of an issue as its own line: one criterion sentence per line
                criteria.extend(c for line in text_lines if line.strip() for c in parse_criteria(line))
            elif entry and any(word in lowered for word in ("follow-on", "follow-up", "follow on")):
                items.extend(_follow_ons(entry, optimizations, items))
            elif entry and heading_tier is not None and list_depth == 1:
                items.append(
                    _bullet_item(
                        entry,
                        heading_tier,
                        optimizations,
                        sum(1 for x in items if x.tier == heading_tier) + 1,
                    )
                )
            elif entry and ("already done" in lowered or "chosen on purpose" in lowered):
                already_done += 1
            context = caption or context
            if heading_tier is not None and list_depth == 1:
                i = end  # nested items were folded into this one
                continue
        elif token.type in ("heading_open", "paragraph_open") and list_depth == 0:
            inline = tokens[i + 1].content.strip()
            if inline:
                title = title or inline.splitlines()[0]
                if document_tier is None and (m := _TIER.search(title)):
                    document_tier = int(m.group(1))
                context = inline.splitlines()[-1]
            if token.type == "heading_open":
                m = re.fullmatch(r"tier[\s-]*(\d+)\b.{0,60}", inline, re.IGNORECASE)
                heading_tier = int(m.group(1)) if m else None
            i += 3
            continue
        elif token.type == "table_open":
            end = _block_end(tokens, i)
            items.extend(
                _items_from_tables(_table_rows(tokens[i:end]), context, document_tier or 1, optimizations)
            )
            i = end
            continue
        i += 1

    if not any(item.auto_apply and not item.follow_on for item in items):
        where = f" in {source}" if source else ""
        if already_done and not items:
            raise PlanError(
                f"the plan{where} has no items to apply: the {already_done} sites it lists are done or kept"
            )
        if held := [item for item in items if not item.auto_apply]:
            done = f"; done already: {already_done} listed site(s)" if already_done else ""
            raise PlanError(
                f"the plan{where} has no items to apply: its {len(held)} item(s) need a person "
                f"(refused sites, proposals or behavioural changes){done}"
            )
        raise PlanError(f"no plan found{where}: {EXPECTED_SHAPE}")
    criteria = [replace(c, tier=document_tier) for c in criteria]
    return Plan(title=title, items=items, criteria=criteria, source=source)


_CAPTIONS = (
    "success criteria",
    "follow-on",
    "follow-up",
    "behavio",
    "performance fixes",
    "testing protocol",
    "commit strategy",
    "report back",
    "scope",
)


def _item_text(tokens: list[Token], folded: bool) -> tuple[list[str], str]:
    """A list item's own lines, and a caption line that ended it.

    Without blank lines, a caption such as ``Success criteria`` written after a list becomes a lazy
    continuation of the last item; it is split off here so it can govern the next list.
    """
    lines: list[str] = []
    depth = 0
    for token in tokens:
        depth += 1 if token.type == "list_item_open" else -1 if token.type == "list_item_close" else 0
        if token.type == "inline" and (depth == 1 or folded):
            lines.extend(line.strip() for line in token.content.splitlines() if line.strip())
    for index in range(len(lines) - 1, 0, -1):
        if any(word in lines[index].lower() for word in _CAPTIONS):
            return lines[:index], lines[index]
    return lines, ""


def _block_end(tokens: list[Token], start: int) -> int:
    """Index just past the closing token of the block opened at ``start``."""
    depth = 0
    for j in range(start, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j + 1
    return len(tokens)


def _table_rows(tokens: list[Token]) -> list[list[str]]:
    rows: list[list[str]] = []
    row: list[str] | None = None
    for token in tokens:
        if token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(token.content.strip())
        elif token.type == "tr_close" and row is not None:
            rows.append(row)
            row = None
    return rows


def _column(header: list[str], *names: str) -> int | None:
    lowered = [h.lower().strip() for h in header]
    for name in names:
        for index, cell in enumerate(lowered):
            if cell == name or cell.startswith(name):
                return index
    return None


def _items_from_tables(
    rows: list[list[str]], context: str, default_tier: int, optimizations: list[Optimization]
) -> list[PlanItem]:
    """Items of every plan table in ``rows``.

    A GFM table runs on until a blank line, so in an issue written without blank lines a caption line
    (``Behavioral changes ...``) and the next table's header and ``---`` delimiter arrive as rows of the first
    table. Those rows are recognised here and split the table into its sections again.
    """
    items: list[PlanItem] = []
    header: list[str] | None = rows[0] if rows else None
    body: list[list[str]] = []
    for index, row in enumerate(rows[1:], start=1):
        following = rows[index + 1] if index + 1 < len(rows) else None
        if _is_delimiter(row):
            continue
        if following is not None and _is_delimiter(following):
            items.extend(_items_from_table(header, body, context, default_tier, optimizations))
            header, body = row, []
        elif sum(1 for cell in row if cell) == 1 and row[0]:
            items.extend(_items_from_table(header, body, context, default_tier, optimizations))
            header, body, context = None, [], row[0]
        elif header is not None:
            body.append(row)
    items.extend(_items_from_table(header, body, context, default_tier, optimizations))
    return items


def _is_delimiter(row: list[str]) -> bool:
    return bool(row) and all(re.fullmatch(r":?-{3,}:?", cell) for cell in row)


def _items_from_table(
    header: list[str] | None,
    body: list[list[str]],
    context: str,
    default_tier: int,
    optimizations: list[Optimization],
) -> list[PlanItem]:
    if header is None or not body:
        return []
    change_col = _column(header, "change")
    if change_col is None:
        return []  # some other table (results, attribution): not a plan
    key_col = _column(header, "#", "item", "key", "id")
    location_col = _column(header, "file:line", "file", "location", "where")
    expected_col = _column(header, "expected win", "expected", "win")
    why_col = _column(header, "why not", "why")
    lowered = context.lower()
    behavioural = "behavio" in lowered or why_col is not None
    proposal = behavioural and "proposal" in lowered
    tier_match = _TIER.search(context)
    tier = int(tier_match.group(1)) if tier_match else default_tier

    def cell(row: list[str], column: int | None) -> str:
        return row[column] if column is not None and column < len(row) else ""

    items = []
    for number, row in enumerate(body, start=1):
        change = cell(row, change_col)
        key = cell(row, key_col) or str(number)
        items.append(
            PlanItem(
                key=key,
                tier=tier,
                change=change,
                location=cell(row, location_col),
                expected=cell(row, expected_col),
                **(NO_MATCHES if behavioural else _matched(change, optimizations)),
                auto_apply=not behavioural,
                why_not=cell(row, why_col),
                proposal=proposal,
            )
        )
    return items


def _bullet_item(entry: str, tier: int, optimizations: list[Optimization], number: int) -> PlanItem:
    """An item of a ``## Tier N`` list: ``A. change — expected win``, with ``opt:<id>`` or keywords."""
    key_match = re.match(r"^\**([A-Z]{1,2})[.):]\**\s+", entry)
    key = key_match.group(1) if key_match else f"T{tier}.{number}"
    change, _, expected = (entry[key_match.end() :] if key_match else entry).partition(" — ")
    behavioural = "behavio" in entry.lower() and "opt:" not in entry.lower()
    location = _LOCATION.search(change)
    return PlanItem(
        key=key,
        tier=tier,
        change=change.strip(),
        location=f"{location.group(1)}:{location.group(2)}" if location else "",
        expected=expected.strip(),
        **(NO_MATCHES if behavioural else _matched(entry, optimizations)),
        auto_apply=not behavioural,
    )


def _follow_ons(entry: str, optimizations: list[Optimization], existing: list[PlanItem]) -> list[PlanItem]:
    """A ``Tier 2 (a, b, c) — note`` entry becomes one follow-on item per listed change."""
    tier_match = _TIER.match(entry)
    if not tier_match:
        return []
    tier = int(tier_match.group(1))
    inner = re.search(r"\(([^)]*)\)", entry)
    parts = [
        p.strip() for p in (inner.group(1) if inner else entry[tier_match.end() :]).split(",") if p.strip()
    ]
    taken = sum(1 for item in existing if item.tier == tier and item.follow_on)
    return [
        PlanItem(
            key=f"T{tier}.{taken + number}",
            tier=tier,
            change=part,
            **_matched(part, optimizations),
            follow_on=True,
        )
        for number, part in enumerate(parts, start=1)
    ]


def parse_criteria(sentence: str) -> list[Criterion]:
    """The checks in one success-criteria sentence, each carrying the whole sentence as its text:
    ``+30% combined on SFT, +20% on DPO`` gives two throughput criteria, ``loss within ±5%`` a loss one, ``no
    crashes`` a stability one, ``all changes applied`` an applied one; a sentence with none of these is kept
    as a manual criterion."""
    sentence = " ".join(sentence.split())
    criteria = []
    for clause in re.split(r"[,;]|\band\b", sentence):
        lowered = clause.lower()
        matches = list(_PERCENT.finditer(clause))
        for match in matches:
            value = float(match.group(2)) / 100
            if "loss" in lowered or match.group(1) == "±":
                criteria.append(Criterion(sentence, LOSS, value))
            elif match.group(1) == "+" or "throughput" in lowered or "faster" in lowered:
                after = clause[match.end() :]
                workload = re.search(r"\b(?:on|for)\s+(?:the\s+)?([A-Za-z][\w-]*)", after)
                before = re.search(r"([A-Za-z][\w-]*)\s*(?:throughput)?\s*$", clause[: match.start()])
                name = workload.group(1) if workload else (before.group(1) if before else None)
                criteria.append(Criterion(sentence, THROUGHPUT, value, name.lower() if name else None))
        if matches:
            continue
        if _NO_CRASH.search(lowered):
            criteria.append(Criterion(sentence, STABILITY))
        elif _ALL_APPLIED.search(lowered):
            criteria.append(Criterion(sentence, APPLIED))
    return criteria or [Criterion(sentence, MANUAL)]
