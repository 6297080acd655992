"""A security sweep of the lines a commit adds.

Credentials are found by their shapes (GitHub, AWS, Hugging Face, OpenAI-style, Google, PyPI and Slack tokens,
private keys, password/secret/API-key literals) in every added line and in commit messages; :mod:`bot.redact`
masks the same shapes in everything the bot writes. Risky code is found in Python's syntax tree of the file at
the commit, import-alias aware, and reported when the call touches an added line: ``eval``/``exec``, shell
commands (``shell=True``, ``os.system``) built from interpolated strings, and new network downloads
(``requests``, ``urllib``, ``torch.hub``, ``hf_hub_download``, ``snapshot_download``,
``from_pretrained("http…")``).
A secret is never repeated in full: the evidence keeps its first characters only.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

CREDENTIAL = "credential"
CODE_EXECUTION = "eval/exec"
SHELL = "shell"
NETWORK = "network download"
COMMIT_MESSAGE = "(commit message)"

# Every quantifier is bounded, so each pattern costs at most a few hundred steps per position: these run on
# untrusted text (comments, commit messages, log tails) in linear time. A private key's block is masked up to
# its END line by :func:`find_secrets`, which searches forward only.
SECRET_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{22,255})")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    (
        "AWS secret access key",
        re.compile(
            r"(?i)aws_?secret_?access_?key['\"]?\s{0,16}[:=]\s{0,16}['\"]?"
            r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
    ),
    ("Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,255}")),
    ("OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,255}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("PyPI token", re.compile(r"\bpypi-[A-Za-z0-9_-]{50,255}")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,255}")),
    ("private key", re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")),
    (
        "password literal",
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|secret|secret_key|api_?key|access_?token|auth_?token)\b['\"]?"
            r"\s{0,16}[:=]\s{0,16}(['\"])(?P<value>[^'\"\s$<{*][^'\"\n]{2,255})\1"
        ),
    ),
)
_KEY_END = "-----END "
_MARKER_END = "-----"

_SHELL_CALLS = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"}
_SUBPROCESS_CALLS = {f"subprocess.{name}" for name in ("run", "call", "check_call", "check_output", "Popen")}
_NETWORK_CALLS = {
    *(f"requests.{verb}" for verb in ("get", "post", "put", "patch", "delete", "head", "request")),
    *(f"httpx.{verb}" for verb in ("get", "post", "put", "patch", "delete", "head", "request", "stream")),
    "urllib.request.urlopen",
    "urllib.request.urlretrieve",
    "urllib.urlopen",
    "urllib.urlretrieve",
    "urllib2.urlopen",
    "wget.download",
    "torch.hub.load",
    "torch.hub.load_state_dict_from_url",
    "torch.hub.download_url_to_file",
}
_HUB_DOWNLOADS = ("hf_hub_download", "snapshot_download")
_EVAL = {"eval", "exec", "builtins.eval", "builtins.exec"}


@dataclass(frozen=True)
class SecurityHit:
    """Something risky on an added line: what it is, where, and how serious."""

    kind: str
    path: str
    line: int
    detail: str
    blocking: bool  # a credential: the verdict fails


def mask(secret: str) -> str:
    """The first four characters and the length: enough to find it, never enough to use it."""
    return f"{secret[:4]}… ({len(secret)} characters)"


def find_secrets(text: str) -> list[tuple[str, int, int]]:
    """``(kind, start, end)`` of every credential-shaped string in ``text``, in linear time. A private key
    spans from its BEGIN line through its END line (to the end of ``text`` when there is none)."""
    found = []
    for name, shape in SECRET_SHAPES:
        group = "value" if "value" in shape.groupindex else 1 if shape.groups else 0
        key_end = (-1, -1)  # (where the next END marker starts, where its line ends): each searched once
        for match in shape.finditer(text):
            start, end = match.span(group)
            if name == "private key":
                if key_end[0] < match.end():
                    key_end = _private_key_end(text, match.end())
                end = key_end[1]
            found.append((name, start, end))
    return found


def _private_key_end(text: str, after: int) -> tuple[int, int]:
    """Where the first END marker after ``after`` starts and ends (``len(text)`` for both without one)."""
    start = text.find(_KEY_END, after)
    if start < 0:
        return len(text), len(text)
    close = text.find(_MARKER_END, start + len(_KEY_END))
    return start, len(text) if close < 0 else close + len(_MARKER_END)


def scan_added_lines(path: str, added: dict[int, str]) -> list[SecurityHit]:
    """Credentials in the added lines (``{line number: text}``) of any text file."""
    hits = []
    for line, text in sorted(added.items()):
        for name, start, end in find_secrets(text):
            hits.append(SecurityHit(CREDENTIAL, path, line, f"{name} `{mask(text[start:end])}`", True))
    return hits


def scan_message(message: str | bytes) -> list[SecurityHit]:
    """Credentials in a commit message (reported at path ``COMMIT_MESSAGE``, line numbers from 1)."""
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    return scan_added_lines(COMMIT_MESSAGE, dict(enumerate(message.splitlines(), start=1)))


def scan_python(path: str, source: str, added_lines: Iterable[int]) -> list[SecurityHit]:
    """Risky calls in a Python file that touch one of ``added_lines``; nothing when the file does not parse."""
    added = set(added_lines)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []  # the lint step reports the syntax error
    aliases = _import_aliases(tree)
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        lines = range(node.lineno, (node.end_lineno or node.lineno) + 1)
        if not added.intersection(lines):
            continue
        name = _qualified_name(node.func, aliases)
        found = _classify(node, name)
        if found is not None:
            kind, detail = found
            hits.append(SecurityHit(kind, path, node.lineno, detail, False))
    return hits


def _classify(call: ast.Call, name: str | None) -> tuple[str, str] | None:
    if name in _EVAL:
        return CODE_EXECUTION, f"`{name}()` runs code built at run time"
    if name in _SHELL_CALLS:
        command = call.args[0] if call.args else None
        how = "an interpolated command" if _is_interpolated(command) else "a shell command"
        return SHELL, f"`{name}()` with {how}"
    if name in _SUBPROCESS_CALLS:
        shell = next((k.value for k in call.keywords if k.arg == "shell"), None)
        command = (
            call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
        )
        uses_shell = shell is not None and not (isinstance(shell, ast.Constant) and not shell.value)
        if uses_shell:
            built = " and an interpolated command" if _is_interpolated(command) else ""
            return SHELL, f"`{name}(..., shell=True)`{built}"
        if _is_interpolated(command):
            return SHELL, f"`{name}()` with a command string built by interpolation"
        return None
    if name in _NETWORK_CALLS or (name and name.rsplit(".", 1)[-1] in _HUB_DOWNLOADS):
        return NETWORK, f"`{name}()` downloads at run time"
    if isinstance(call.func, ast.Attribute) and call.func.attr == "from_pretrained" and call.args:
        first = call.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            if first.value.startswith(("http://", "https://")):
                return NETWORK, f"`from_pretrained({first.value!r})` downloads from a URL"
    return None


def _is_interpolated(node: ast.AST | None) -> bool:
    """A string assembled at run time: an f-string with fields, ``+``/``%`` on strings, ``"...".format()``."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(value, ast.FormattedValue) for value in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return any(_is_stringish(side) for side in (node.left, node.right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _is_stringish(node.func.value)
    return False


def _is_stringish(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(node, ast.JoinedStr)


def _import_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name → dotted origin, from every import in the module (``import subprocess as sp`` → ``sp``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _qualified_name(func: ast.AST, aliases: dict[str, str]) -> str | None:
    """``sp.run`` → ``subprocess.run`` through the module's imports; None for calls on computed objects."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    return ".".join([aliases.get(func.id, func.id), *reversed(parts)])
