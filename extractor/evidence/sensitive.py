"""What must never leave the pipeline unnoticed: secrets, personal data and instructions aimed at the pipeline.

Pure detectors over one string, shared by the critical rules (``extractor.rules.guards``) and export masking:

- ``find_secrets``: detect-secrets' own plugins (AWS, GitHub, GitLab, Slack, Stripe, OpenAI, JWT, private keys,
  passwords in connection strings, ``password = "..."`` keywords...), plus one pattern for connection-string
  passwords with punctuation, which its Basic Auth pattern misses. Its entropy detectors and the public-IP
  detector are left out on purpose: a commit hash, a UUID or a server address in a runbook is not a secret,
  and they flag exactly those.
- ``personal_data``: e-mail addresses; phone numbers (``phonenumbers``, valid numbers only, Korean, Russian
  and North American formats, compared as E.164); card numbers (13-19 digits passing Luhn); Korean resident
  registration numbers (``stdnum.kr.rrn``: birth date and check digit); Russian INN (``stdnum.ru.inn``, 10 or
  12 digits with check digits) and SNILS (11 digits, its check number). A number whose checksum fails is
  not reported: that is what keeps order numbers and amounts quiet.
- ``pipeline_instructions``: phrases that address the pipeline instead of describing the business ("ignore
  previous instructions", "mark this document approved", "system prompt"), in English, Korean and Russian.

Every detector returns ``Match``es with the exact span, so a finding can quote its location and export can mask
the span without re-parsing anything.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

PHONE_REGIONS = ("KR", "RU", "US")
"""Regions whose national formats are read as phone numbers (an international +CC number is read anywhere)."""
ENTROPY_PLUGINS = frozenset({"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"})
"""detect-secrets plugins not used: they fire on hashes, UUIDs and addresses, the nearest harmless neighbours."""
MIN_SECRET_CHARS = 8
"""Values shorter than this are not scanned for secrets (no detector matches fewer characters)."""


@dataclass(frozen=True, slots=True)
class Match:
    """One detected item: its ``kind`` (a label a person reads), the ``key`` it is compared by, and its span."""

    kind: str
    key: str
    start: int
    end: int


# -- secrets -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Needs:
    """Literals a pattern cannot match without: one member of each of ``sets``, compared in lower case when the
    pattern ignores case. Declared next to each pattern (``SECRET_LITERALS``, ``PIPELINE_INSTRUCTIONS``) and
    checked against the pattern's matches by tests/test_secret_scan.py; most texts hold none of them, and looking
    for words is a fraction of a search that tries a pattern at every position."""

    sets: tuple[tuple[str, ...], ...]
    ignore_case: bool

    @classmethod
    def of(cls, pattern: re.Pattern[str], *sets: tuple[str, ...]) -> Needs:
        """The literals ``sets`` as ``pattern`` compares them. A pattern that ignores case needs ASCII literals:
        ``str.lower`` reads those as ``re.IGNORECASE`` does in any text without ``_CASE_SPECIALS``."""
        ignore_case = bool(pattern.flags & re.IGNORECASE)
        if not sets or not all(sets) or (ignore_case and not all(word.isascii() for words in sets for word in words)):
            raise ValueError(f"no literals, or non-ASCII ones for a pattern that ignores case: {pattern.pattern!r}")
        return cls(tuple(tuple(word.lower() if ignore_case else word for word in words) for words in sets), ignore_case)

    def met(self, text: str, lowered: str) -> bool:
        """Whether ``text`` (``lowered``: ``text.lower()``) holds a member of each set."""
        haystack = lowered if self.ignore_case else text
        return all(any(word in haystack for word in words) for words in self.sets)


_CASE_SPECIALS = frozenset("\u0130\u0131\u017f")
"""İ, ı and ſ: ``re.IGNORECASE`` matches them to i and s, ``str.lower`` does not (a text holding one is scanned
in full, without the literal shortcut)."""

_QUOTE = r"""(?:"|\'|)"""
_NAMED = r"(?:(?<=\W)|(?<=^))(?:\[|)" + _QUOTE
_ASSIGNED = _QUOTE + r"(?:\]|)(?: *)(?:=|:|:=|=>| +|::)(?: *)" + _QUOTE
_PASSWORD = ("key", "pw", "pass", "token")
SECRET_LITERALS: tuple[tuple[str, re.RegexFlag, tuple[tuple[str, ...], ...]], ...] = (
    # AWSKeyDetector
    ("(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}", re.NOFLAG, (("A3T", "ABIA", "ACCA", "AKIA", "ASIA"),)),
    (r"""aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\'\"]([0-9a-zA-Z/+]{40})[\'\"]""", re.IGNORECASE,
     (("aws",), _PASSWORD)),
    # ArtifactoryDetector
    (r'(?:\s|=|:|"|^)AKC[a-zA-Z0-9]{10,}(?:\s|"|$)', re.NOFLAG, (("AKC",),)),
    (r'(?:\s|=|:|"|^)AP[\dABCDEF][a-zA-Z0-9]{8,}(?:\s|"|$)', re.NOFLAG, (("AP",),)),
    # CloudantDetector
    (_NAMED + "(?:cloudant|cl|clou)(?:_|-|)(?:api|)(?:key|pwd|pw|password|pass|token)" + _ASSIGNED
     + "([0-9a-f]{64})" + _QUOTE, re.IGNORECASE, (("cl",), _PASSWORD)),
    (_NAMED + "(?:cloudant|cl|clou)(?:_|-|)(?:api|)(?:key|pwd|pw|password|pass|token)" + _ASSIGNED
     + "([a-z]{24})" + _QUOTE, re.IGNORECASE, (("cl",), _PASSWORD)),
    (r"(?:https?\:\/\/)[\w\-]+\:([0-9a-f]{64})\@[\w\-]+\.cloudant\.com", re.IGNORECASE, ((".cloudant.com",),)),
    (r"(?:https?\:\/\/)[\w\-]+\:([a-z]{24})\@[\w\-]+\.cloudant\.com", re.IGNORECASE, ((".cloudant.com",),)),
    # IbmCloudIamDetector
    (_NAMED + "(?:ibm(?:_|-|)cloud(?:_|-|)iam|cloud(?:_|-|)iam|ibm(?:_|-|)cloud|ibm(?:_|-|)iam|ibm|iam|cloud|)"
     "(?:_|-|)(?:api|)(?:_|-|)(?:key|pwd|password|pass|token)" + _ASSIGNED
     + r"([a-zA-Z0-9_\-]{44}(?![a-zA-Z0-9_\-]))" + _QUOTE, re.IGNORECASE, (("key", "pwd", "pass", "token"),)),
    # IbmCosHmacDetector
    (_NAMED + "(?:(?:ibm)?[-_]?cos[-_]?(?:hmac)?|)(?:_|-|)(?:secret[-_]?(?:access)?[-_]?key)" + _ASSIGNED
     + "([a-f0-9]{48}(?![a-f0-9]))" + _QUOTE, re.IGNORECASE, (("secret",), ("key",))),
    # MailchimpDetector
    ("[0-9a-z]{32}-us[0-9]{1,2}", re.NOFLAG, (("-us",),)),
    # SlackDetector
    (r"xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+", re.IGNORECASE, (("xox",),)),
    (r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+", re.IGNORECASE | re.VERBOSE,
     (("hooks.slack.com/services/",),)),
    # SoftlayerDetector
    (_NAMED + "(?:softlayer|sl)(?:_|-|)(?:api|)(?:_|-|)(?:key|pwd|password|pass|token)" + _ASSIGNED
     + "([a-z0-9]{64})" + _QUOTE, re.IGNORECASE, (("key", "pwd", "pass", "token"),)),
    ("(?:http|https)://api.softlayer.com/soap/(?:v3|v3.1)/([a-z0-9]{64})", re.IGNORECASE, (("softlayer",),)),
    # StripeDetector
    ("(?:r|s)k_live_[0-9a-zA-Z]{24}", re.NOFLAG, (("k_live_",),)),
)
"""(pattern, flags, literals) of the detect-secrets 1.5 patterns whose search is slow over text that holds no
secret (keyword-anchored, or led by a character class: nine tenths of the regex plugins' search time over the
sample answers): a text holding none of a pattern's literals is not searched with it. A plugin is skipped only
when every pattern it has is listed here with the same text and flags: another version's patterns, or a plugin
of the user's own (detect-secrets' ``plugins_used``), are searched in every text. The other plugins' patterns
start with a literal, which the search finds as fast as the shortcut would, or hold none worth looking for."""


@cache
def _declared() -> dict[tuple[str, int], Needs]:
    """``SECRET_LITERALS`` by (pattern text, flags) as a compiled pattern has them."""
    compiled = ((re.compile(text, flags), sets) for text, flags, sets in SECRET_LITERALS)
    return {(pattern.pattern, pattern.flags): Needs.of(pattern, *sets) for pattern, sets in compiled}


def _shortcut(plugin: Any) -> tuple[Needs, ...] | None:
    """The literals of each of a regex plugin's patterns, when all are declared and the plugin reports only what
    its patterns match (it keeps detect-secrets' own ``analyze_string``); None: the plugin reads every text."""
    from detect_secrets.plugins.base import RegexBasedDetector

    if type(plugin).analyze_string is not RegexBasedDetector.analyze_string:
        return None
    try:
        return tuple(_declared()[(pattern.pattern, pattern.flags)] for pattern in plugin.denylist) or None
    except KeyError:
        return None


@cache
def _secret_plugins() -> tuple[tuple[Any, tuple[Needs, ...] | None], ...]:
    """One instance of every detect-secrets plugin but the entropy and IP ones (built once per process, with any
    the user configured in detect-secrets' settings), each with its patterns' literals (``_shortcut``)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: list[type[Any]] = sorted(get_mapping_from_secret_type_to_class().values(), key=lambda c: c.__name__)
    plugins = [plugin() for plugin in classes if plugin.__name__ not in ENTROPY_PLUGINS]
    return tuple((plugin, _shortcut(plugin)) for plugin in plugins)


@cache
def _keywords() -> tuple[re.Pattern[str], re.Pattern[str] | None]:
    """The keyword plugin's own words (password, api_key, ...): the lines it can fire on are those naming one
    in any letter case; and the same words for one search over lower-cased text (``None`` if some word is not
    written in lower case: no shortcut). An ``re.IGNORECASE`` search of these words costs ten times a plain one."""
    from detect_secrets.plugins.keyword import DENYLIST

    words = "|".join(DENYLIST)
    return re.compile(words, re.IGNORECASE), re.compile(words) if words == words.lower() else None


CONNECTION_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.\-]*://[^\s\x00:/@]+:([^\s\x00/@]+)@[^\s\x00/@]", re.IGNORECASE)
"""A password in a connection string as people write them. detect-secrets' Basic Auth pattern follows RFC 3986
strictly and misses a password holding ``!$&'()*+,;=`` (``postgresql://app:Summer2026!@db/po``); this one
complements it, the kind is the same."""
SEPARATOR = "\n\x00\n"
"""Between the texts scanned as one: no plugin pattern matches across a NUL on its own line."""


def find_secrets(texts: Sequence[str]) -> dict[int, list[Match]]:
    """Secrets in each of ``texts`` (by position), found by detect-secrets' plugins, with their spans.

    The plugins' ``analyze_string`` is called directly, never ``analyze_line`` or ``scan_line``: those read
    process-wide settings (which may turn on verification, a network call with the secret) and, for ad-hoc
    strings, turn the entropy detectors up. The regex plugins scan all texts at once (one pass each instead of
    one per text: thousands of coverage reasons cost milliseconds), skipped where the texts lack their patterns'
    declared literals (``SECRET_LITERALS``); the keyword plugin, which reports only its first match, reads each
    line that names one of its keywords; any other plugin (one the user configured) reads every line.
    """
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.keyword import KeywordDetector

    scanned = [index for index, text in enumerate(texts) if len(text) >= MIN_SECRET_CHARS]
    if not scanned:
        return {}
    kinds: dict[str, str] = {}
    joined = SEPARATOR.join(dict.fromkeys(texts[index] for index in scanned))  # each distinct text once
    lowered = None if _CASE_SPECIALS.intersection(joined) else joined.lower()
    for plugin, needs in _secret_plugins():
        if isinstance(plugin, RegexBasedDetector):
            if lowered is not None and needs is not None and not any(n.met(joined, lowered) for n in needs):
                continue
            found = plugin.analyze_string(joined)
        elif type(plugin) is KeywordDetector:
            any_case, lower_case = _keywords()
            if lowered is not None and lower_case is not None and not lower_case.search(lowered):
                continue  # no line names a keyword: one search, not one per line
            found = (value for index in scanned for line in texts[index].splitlines()
                     if any_case.search(line) for value in plugin.analyze_string(line))
        else:  # a plugin of the user's own: every line, as detect-secrets reads a file
            found = (value for index in scanned for line in texts[index].splitlines()
                     for value in plugin.analyze_string(line))
        for value in found:
            if value and "\x00" not in value:
                kinds.setdefault(value, plugin.secret_type)
    for password in CONNECTION_PASSWORD.findall(joined):
        kinds.setdefault(password, "Basic Auth Credentials")
    matches: dict[int, list[Match]] = {}
    for index in scanned if kinds else ():
        text = texts[index]
        for value, kind in kinds.items():
            start = text.find(value)
            while start >= 0:
                matches.setdefault(index, []).append(Match(kind, value, start, start + len(value)))
                start = text.find(value, start + 1)
    return {index: sorted(found, key=lambda m: (m.start, m.kind)) for index, found in matches.items()}


# -- personal data -------------------------------------------------------------------------------------------

EMAIL = re.compile(r"(?<![\w.+-])(?<!://)[\w.+-]+@(?:[^\W_](?:[\w-]*[^\W_])?\.)+[^\W\d_]{2,}(?![\w-])")
"""An e-mail address; ``user@host`` right after ``scheme://`` is a URL's user, not an address."""
NUMBER = re.compile(r"(?<![\w.,])\d(?:[ \-]?\d){8,18}(?![\w])")
"""9 to 19 digits, single spaces or hyphens between them (card, RRN, SNILS, INN as people write them)."""
SNILS_WEIGHTS = range(9, 0, -1)


def snils_valid(digits: str) -> bool:
    """Russian SNILS check number: sum of the first nine digits weighted 9..1, modulo 101 (100 and 101 give 00).

    Numbers up to 001-001-998 were issued without a check number and are not read as SNILS.
    """
    if len(digits) != 11 or not digits.isdigit() or int(digits[:9]) <= 1001998:
        return False
    total = sum(int(d) * w for d, w in zip(digits[:9], SNILS_WEIGHTS))
    check = total % 101 if total > 101 else total
    return (0 if check == 100 else check) == int(digits[9:])


def _numbers(text: str) -> Iterator[Match]:
    from stdnum import luhn
    from stdnum.kr import rrn
    from stdnum.ru import inn

    for found in NUMBER.finditer(text):
        digits = re.sub(r"\D", "", found.group())
        kinds = []
        if len(digits) == 13 and rrn.is_valid(digits):
            kinds.append("Korean resident registration number")
        if len(digits) == 11 and snils_valid(digits):
            kinds.append("SNILS")
        if len(digits) in (10, 12) and inn.is_valid(digits):
            kinds.append("INN")
        if 13 <= len(digits) <= 19 and not kinds and luhn.is_valid(digits):
            kinds.append("card number")
        for kind in kinds:
            yield Match(kind, digits, found.start(), found.end())


LONG_DIGITS = re.compile(r"\d(?:[\s().\-/]{0,3}\d){6,}")
"""Seven or more digits, as the shortest phone numbers read here have (a line without them has no phone number)."""


def _phones(text: str) -> Iterator[Match]:
    """Valid phone numbers, read only in the lines that hold enough digits (the matcher is slow on every "12")."""
    import phonenumbers

    seen: set[tuple[int, int]] = set()
    offset = 0
    for line in text.splitlines(keepends=True):
        if LONG_DIGITS.search(line):
            for region in PHONE_REGIONS:
                for found in phonenumbers.PhoneNumberMatcher(line, region, leniency=phonenumbers.Leniency.VALID):
                    span = (offset + found.start, offset + found.end)
                    if span in seen:
                        continue
                    seen.add(span)
                    key = phonenumbers.format_number(found.number, phonenumbers.PhoneNumberFormat.E164)
                    yield Match("phone number", key, *span)
        offset += len(line)


MAYBE_PERSONAL = re.compile(r"[\d@]")


def personal_data(text: str) -> list[Match]:
    """E-mail addresses, phone numbers and checksum-valid identity and card numbers in ``text``.

    A digit run that is an identity number is not also reported as a phone number.
    """
    if not MAYBE_PERSONAL.search(text):
        return []
    found = [Match("e-mail address", m.group().casefold(), m.start(), m.end()) for m in EMAIL.finditer(text)]
    numbers = list(_numbers(text))
    found += numbers
    taken = [(m.start, m.end) for m in numbers] + [(m.start, m.end) for m in found if m.kind == "e-mail address"]
    found += [m for m in _phones(text) if not any(m.start < end and start < m.end for start, end in taken)]
    return sorted(found, key=lambda m: (m.start, m.kind))


def find_personal_data(texts: Sequence[str]) -> dict[int, list[Match]]:
    """``personal_data`` of each of ``texts`` (by position, spans within each text), read in one pass over the
    distinct texts."""
    from bisect import bisect_right

    positions: dict[str, list[int]] = {}
    for index, text in enumerate(texts):
        positions.setdefault(text, []).append(index)
    distinct = list(positions)
    starts, position = [], 0
    for text in distinct:
        starts.append(position)
        position += len(text) + len(SEPARATOR)
    found: dict[int, list[Match]] = {}
    for match in personal_data(SEPARATOR.join(distinct)):
        which = bisect_right(starts, match.start) - 1
        offset, text = starts[which], distinct[which]
        if match.end - offset <= len(text):  # never across two texts
            for index in positions[text]:
                found.setdefault(index, []).append(Match(match.kind, match.key, match.start - offset,
                                                         match.end - offset))
    return found


def mask(text: str, matches: Iterable[Match]) -> str:
    """``text`` with every matched span replaced by ``*`` (its last two characters kept, to tell items apart)."""
    out, position = [], 0
    for match in sorted(matches, key=lambda m: m.start):
        if match.start < position:
            continue
        span = text[match.start:match.end]
        out += [text[position:match.start], "*" * max(len(span) - 2, 1) + span[-2:] if len(span) > 3 else "***"]
        position = match.end
    out.append(text[position:])
    return "".join(out)


# -- instructions aimed at the pipeline -------------------------------------------------------------------------

def _phrase(name: str, pattern: str, *literals: tuple[str, ...]) -> tuple[str, re.Pattern[str], Needs]:
    compiled = re.compile(pattern)
    return name, compiled, Needs.of(compiled, *literals)


PIPELINE_INSTRUCTIONS: tuple[tuple[str, re.Pattern[str], Needs], ...] = (
    _phrase("ignore previous instructions",
            r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+|these\s+)?"
            r"(?:previous|prior|above|earlier|preceding|system|original)\s+"
            r"(?:instructions|prompts?|rules|messages|directions)",
            ("ignore", "disregard", "forget", "override"),
            ("previous", "prior", "above", "earlier", "preceding", "system", "original"),
            ("instructions", "prompt", "rules", "messages", "directions")),
    _phrase("mark this approved",
            r"\bmark\s+(?:this|itself)(?:\s+(?:document|record|extraction|output|result|candidate|file|entry))?\s+"
            r"(?:as\s+)?(?:approved|passed|valid|verified|accepted|safe)\b",
            ("mark",), ("this", "itself"), ("approved", "passed", "valid", "verified", "accepted", "safe")),
    _phrase("system prompt",
            r"\b(?:reveal|print|repeat|show|output)\s+(?:your|the)\s+(?:system\s+)?(?:prompt|instructions)\b"
            r"|\bsystem\s+prompt\b",
            ("prompt", "instructions")),
    _phrase("이전 지시 무시",
            r"(?:이전|앞의|위의|기존|모든)\s*(?:의\s*)?(?:모든\s*)?(?:지시|지침|명령|규칙)(?:사항)?\s*(?:을|를|은|는|들을)?\s*"
            r"(?:모두\s*|전부\s*)?(?:무시|잊)",
            ("이전", "앞의", "위의", "기존", "모든"), ("지시", "지침", "명령", "규칙"), ("무시", "잊")),
    _phrase("이 문서를 승인으로 표시",
            r"이\s*(?:문서|기록|결과|항목)\s*(?:를|을|는|은)?\s*(?:자동\s*(?:으로)?\s*)?승인\s*(?:된\s*것으로|됨으로|으로)?\s*"
            r"(?:표시|처리|간주)",
            ("문서", "기록", "결과", "항목"), ("승인",), ("표시", "처리", "간주")),
    _phrase("시스템 프롬프트", r"시스템\s*프롬프트", ("시스템",), ("프롬프트",)),
    _phrase("игнорируй предыдущие инструкции",
            r"(?:игнорируй(?:те)?|забудь(?:те)?|не\s+обращай(?:те)?\s+внимания\s+на|отмени(?:те)?)\s+(?:все\s+)?"
            r"(?:предыдущие|прежние|прошлые|вышеуказанные|системные|исходные)\s+(?:инструкции|указания|правила|команды)",
            ("игнорируй", "забудь", "обращай", "отмени"),
            ("предыдущие", "прежние", "прошлые", "вышеуказанные", "системные", "исходные"),
            ("инструкции", "указания", "правила", "команды")),
    _phrase("отметь как одобренный",
            r"(?:отметь(?:те)?|пометь(?:те)?|считай(?:те)?|признай(?:те)?)\s+(?:этот|данный|это|эту|данную)\s*"
            r"(?:документ|запись|результат|извлечение)?\s+(?:как\s+)?(?:одобрен|утвержд[её]н|принят|проверен)",
            ("отметь", "пометь", "считай", "признай"), ("это", "эту", "данный", "данную"),
            ("одобрен", "утвержд", "принят", "проверен")),
    _phrase("системный промпт", r"системн(?:ый|ого|ому|ым|ом)\s+(?:промпт|prompt)", ("системн",), ("промпт", "prompt")),
)
"""(name, pattern, the literals any match holds) over NFKC-casefolded text. Business text tells people what to do
("the manager marks the request approved"); these address the document itself or the model ("mark this document
approved"). Most texts hold none of the literals, and looking for them costs a fraction of the pattern search."""


def normalise(text: str) -> str:
    """NFKC, casefold and collapsed whitespace: how phrases and prompt text are compared."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def pipeline_instructions(text: str) -> list[str]:
    """The names of the pipeline-aimed phrases ``text`` contains."""
    folded = normalise(text)
    return [name for name, pattern, needs in PIPELINE_INSTRUCTIONS if needs.met(folded, folded) and pattern.search(folded)]


def shingles(text: str, size: int) -> set[tuple[str, ...]]:
    """Every run of ``size`` consecutive normalised words of ``text``."""
    words = normalise(text).split()
    return {tuple(words[i:i + size]) for i in range(len(words) - size + 1)}
