"""A local stand-in for the GitHub REST API, and a bare git repository as the remote (pytest fixtures).

:class:`FakeGitHub` is a real HTTP server on 127.0.0.1 (a random port, in a thread) answering the REST
subset the bot uses with GitHub's JSON shapes, so PyGithub talks to it unchanged with
``base_url=server.url``. The token decides who "you" are. Tests seed users, repositories, issues and
comments directly, inject faults (``fail``, ``rate_limit``, ``slow``), and inspect the in-memory store
afterwards.

:class:`GitHttpServer` serves bare repositories over git's smart HTTP protocol (``git http-backend``) on
127.0.0.1 behind Basic authentication, and notes every process whose command line shows the token.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import git
import pytest

TIMESTAMP = "2026-04-17T12:00:00Z"
# The legacy ``permission`` value the API reports beside the fine-grained ``role_name``.
LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}
WRITE_ROLES = {"admin", "maintain", "write"}
SECONDARY_RATE_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)


@dataclass
class Fault:
    """Answer the next ``times`` requests matching ``method`` and the ``path`` pattern with ``status``.

    ``status=None`` drops the connection without an answer. ``after=True`` processes the request first
    (the answer is lost on the way back, as when a proxy times out). ``delay`` (seconds) instead holds the
    request that long, then processes and answers it as usual (the client may have given up by then).
    """

    method: str
    path: str
    status: int | None
    times: int = 1
    after: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "Server Error"
    delay: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and method == self.method and re.fullmatch(self.path, path) is not None


class _Dropped(Exception):
    """Close the connection without answering."""


class ApiError(Exception):
    """An HTTP error answer with GitHub's error body."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class FakeGitHub:
    """GitHub's REST subset over HTTP, backed by an in-memory store tests can read and seed."""

    def __init__(self) -> None:
        self.users: dict[str, dict] = {}  # token -> {"login", "type", "can_read_user"}
        self.repos: dict[str, dict] = {}  # "owner/name" -> repository record
        self.comments: dict[int, dict] = {}  # id -> stored comment (with "repo", "issue", "history")
        self.reactions: list[dict] = []  # each with "comment_id", "user", "content"
        self.pulls: list[dict] = []
        self.requests: list[tuple[str, str, str]] = []  # (method, path, login) in arrival order
        self.faults: list[Fault] = []
        self._ids = itertools.count(1001)
        self._lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    # --- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- seeding -----------------------------------------------------------------------------------------

    def add_user(self, token: str, login: str, *, bot: bool = False, can_read_user: bool = True) -> None:
        """A user whose requests carry ``token``; ``can_read_user=False`` mimics an installation token."""
        self.users[token] = {"login": login, "type": "Bot" if bot else "User", "can_read_user": can_read_user}

    def add_repo(
        self,
        full_name: str,
        *,
        roles: dict[str, str] | None = None,
        default_branch: str = "main",
        clone_url: str | None = None,
        private: bool = False,
    ) -> None:
        """A repository; ``roles`` maps collaborators to admin/maintain/write/triage/read."""
        self.repos[full_name] = {
            "id": next(self._ids),
            "roles": dict(roles or {}),
            "default_branch": default_branch,
            "clone_url": clone_url or f"https://github.example/{full_name}.git",
            "private": private,
            "issues": {},
        }

    def add_issue(self, repo: str, number: int, title: str, body: str, author: str = "octocat") -> None:
        self.repos[repo]["issues"][number] = {
            "number": number,
            "title": title,
            "body": body,
            "author": author,
        }

    def add_comment(self, repo: str, issue: int, author: str, body: str) -> dict:
        """Seed a comment as if ``author`` had posted it."""
        with self._lock:
            comment = {
                "id": next(self._ids),
                "repo": repo,
                "issue": issue,
                "author": author,
                "body": body,
                "history": [],
            }
            self.comments[comment["id"]] = comment
            return comment

    # --- fault injection ---------------------------------------------------------------------------------

    def fail(
        self, method: str, path: str, status: int | None = 500, times: int = 1, after: bool = False
    ) -> Fault:
        """Fail the next ``times`` requests to ``path`` (a regular expression) with ``status``."""
        fault = Fault(method, path, status, times, after)
        self.faults.append(fault)
        return fault

    def rate_limit(self, method: str, path: str, retry_after: int | None = None, status: int = 403) -> Fault:
        """One secondary-rate-limit answer, with ``Retry-After`` when given, as GitHub sends them."""
        headers = {"x-ratelimit-remaining": "4999"}
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        fault = Fault(method, path, status, 1, False, headers, SECONDARY_RATE_LIMIT_MESSAGE)
        self.faults.append(fault)
        return fault

    def slow(self, method: str, path: str, seconds: float, times: int = 1) -> Fault:
        """Hold the next ``times`` requests to ``path`` for ``seconds``, then process and answer them."""
        fault = Fault(method, path, None, times, delay=seconds)
        self.faults.append(fault)
        return fault

    # --- inspection --------------------------------------------------------------------------------------

    def comments_on(self, repo: str, issue: int) -> list[dict]:
        """Stored comments on an issue, oldest first."""
        return [
            c
            for c in sorted(self.comments.values(), key=lambda c: c["id"])
            if (c["repo"], c["issue"]) == (repo, issue)
        ]

    def reactions_on(self, comment_id: int) -> list[str]:
        return [r["content"] for r in self.reactions if r["comment_id"] == comment_id]

    def count(self, method: str, path: str) -> int:
        """How many requests (faulted ones included) reached ``method path`` (a regular expression)."""
        return sum(1 for m, p, _ in self.requests if m == method and re.fullmatch(path, p))

    # --- JSON shapes -------------------------------------------------------------------------------------

    def _user_json(self, login: str) -> dict:
        bot = any(u["login"] == login and u["type"] == "Bot" for u in self.users.values())
        return {
            "login": login,
            "id": abs(hash(login)) % 10**7,
            "node_id": f"U_{login}",
            "type": "Bot" if bot else "User",
            "site_admin": False,
            "url": f"{self.url}/users/{login}",
            "html_url": f"https://github.example/{login}",
        }

    def _repo_json(self, full_name: str) -> dict:
        repo = self.repos[full_name]
        owner, name = full_name.split("/")
        return {
            "id": repo["id"],
            "node_id": f"R_{repo['id']}",
            "name": name,
            "full_name": full_name,
            "owner": self._user_json(owner),
            "private": repo["private"],
            "default_branch": repo["default_branch"],
            "clone_url": repo["clone_url"],
            "html_url": f"https://github.example/{full_name}",
            "url": f"{self.url}/repos/{full_name}",
        }

    def _issue_json(self, full_name: str, issue: dict) -> dict:
        api = f"{self.url}/repos/{full_name}/issues/{issue['number']}"
        return {
            "id": 10**6 + issue["number"],
            "node_id": f"I_{issue['number']}",
            "number": issue["number"],
            "title": issue["title"],
            "body": issue["body"],
            "state": "open",
            "user": self._user_json(issue["author"]),
            "labels": [],
            "comments": len(self.comments_on(full_name, issue["number"])),
            "url": api,
            "comments_url": f"{api}/comments",
            "html_url": f"https://github.example/{full_name}/issues/{issue['number']}",
            "created_at": TIMESTAMP,
            "updated_at": TIMESTAMP,
        }

    def _comment_json(self, comment: dict) -> dict:
        full_name, number = comment["repo"], comment["issue"]
        role = self.repos[full_name]["roles"].get(comment["author"])
        return {
            "id": comment["id"],
            "node_id": f"IC_{comment['id']}",
            "url": f"{self.url}/repos/{full_name}/issues/comments/{comment['id']}",
            "html_url": f"https://github.example/{full_name}/issues/{number}#issuecomment-{comment['id']}",
            "issue_url": f"{self.url}/repos/{full_name}/issues/{number}",
            "body": comment["body"],
            "user": self._user_json(comment["author"]),
            "author_association": "COLLABORATOR" if role else "NONE",
            "created_at": TIMESTAMP,
            "updated_at": TIMESTAMP,
        }

    def _pull_json(self, pull: dict) -> dict:
        full_name = pull["repo"]
        owner = full_name.split("/")[0]
        return {
            "id": 2 * 10**6 + pull["number"],
            "node_id": f"PR_{pull['number']}",
            "number": pull["number"],
            "state": pull["state"],
            "title": pull["title"],
            "body": pull["body"],
            "user": self._user_json(pull["author"]),
            "head": {"ref": pull["head"], "label": f"{owner}:{pull['head']}", "sha": "0" * 40},
            "base": {"ref": pull["base"], "label": f"{owner}:{pull['base']}", "sha": "0" * 40},
            "url": f"{self.url}/repos/{full_name}/pulls/{pull['number']}",
            "html_url": f"https://github.example/{full_name}/pull/{pull['number']}",
            "created_at": TIMESTAMP,
            "updated_at": TIMESTAMP,
        }

    # --- request handling --------------------------------------------------------------------------------

    def handle(
        self, method: str, raw_path: str, token: str | None, payload: dict
    ) -> tuple[int, object, dict]:
        """Answer one request: (status, JSON body, extra headers). Raises ApiError or _Dropped."""
        parts = urlsplit(raw_path)
        path, query = parts.path.rstrip("/") or "/", {k: v[-1] for k, v in parse_qs(parts.query).items()}
        user = self.users.get(token or "")
        with self._lock:
            self.requests.append((method, path, user["login"] if user else ""))
            fault = next((f for f in self.faults if f.matches(method, path)), None)
            if fault:
                fault.times -= 1
        if fault and fault.delay:
            time.sleep(fault.delay)
            fault = None
        if fault and not fault.after:
            self._raise(fault)
        if user is None:
            raise ApiError(401, "Bad credentials")
        with self._lock:
            answer = self._route(method, path, query, user, payload)
        if fault:
            self._raise(fault)
        return answer

    @staticmethod
    def _raise(fault: Fault) -> None:
        if fault.status is None:
            raise _Dropped()
        raise ApiError(fault.status, fault.message, fault.headers)

    def _route(
        self, method: str, path: str, query: dict, user: dict, payload: dict
    ) -> tuple[int, object, dict]:
        login = user["login"]
        if (method, path) == ("GET", "/user"):
            if not user["can_read_user"]:
                raise ApiError(403, "Resource not accessible by integration")
            return 200, self._user_json(login), {}
        match = re.fullmatch(r"/repos/([^/]+/[^/]+)(/.*)?", path)
        if not match or match[1] not in self.repos:
            raise ApiError(404, "Not Found")
        full_name, rest = match[1], match[2] or ""
        repo = self.repos[full_name]
        routes = [
            ("GET", r"", lambda: (200, self._repo_json(full_name), {})),
            ("GET", r"/issues/(\d+)", lambda n: (200, self._issue_json(full_name, self._issue(repo, n)), {})),
            ("GET", r"/issues/(\d+)/comments", lambda n: self._list_comments(full_name, repo, n, query)),
            (
                "POST",
                r"/issues/(\d+)/comments",
                lambda n: self._create_comment(full_name, repo, n, login, payload),
            ),
            (
                "GET",
                r"/issues/comments/(\d+)",
                lambda i: (200, self._comment_json(self._stored(full_name, i)), {}),
            ),
            ("PATCH", r"/issues/comments/(\d+)", lambda i: self._edit_comment(full_name, i, login, payload)),
            ("DELETE", r"/issues/comments/(\d+)", lambda i: self._delete_comment(full_name, i, login)),
            (
                "POST",
                r"/issues/comments/(\d+)/reactions",
                lambda i: self._react(full_name, i, login, payload),
            ),
            ("GET", r"/collaborators/([^/]+)/permission", lambda u: (200, self._permission(repo, u), {})),
            ("GET", r"/pulls", lambda: self._list_pulls(full_name, query)),
            ("POST", r"/pulls", lambda: self._create_pull(full_name, login, payload)),
            ("GET", r"/pulls/(\d+)", lambda n: (200, self._pull_json(self._pull(full_name, n)), {})),
            ("PATCH", r"/pulls/(\d+)", lambda n: self._edit_pull(full_name, n, payload)),
        ]
        for route_method, pattern, action in routes:
            found = re.fullmatch(pattern, rest)
            if found and route_method == method:
                return action(*found.groups())
        raise ApiError(404, "Not Found")

    def _issue(self, repo: dict, number: str) -> dict:
        if int(number) not in repo["issues"]:
            raise ApiError(404, "Not Found")
        return repo["issues"][int(number)]

    def _stored(self, full_name: str, comment_id: str) -> dict:
        comment = self.comments.get(int(comment_id))
        if comment is None or comment["repo"] != full_name:
            raise ApiError(404, "Not Found")
        return comment

    def _list_comments(
        self, full_name: str, repo: dict, number: str, query: dict
    ) -> tuple[int, object, dict]:
        self._issue(repo, number)
        everything = self.comments_on(full_name, int(number))
        per_page = min(int(query.get("per_page", 30)), 100)
        page = int(query.get("page", 1))
        base = f"{self.url}/repos/{full_name}/issues/{number}/comments"
        last = max(1, -(-len(everything) // per_page))
        links = []
        if page < last:
            links.append(f'<{base}?{urlencode({"per_page": per_page, "page": page + 1})}>; rel="next"')
            links.append(f'<{base}?{urlencode({"per_page": per_page, "page": last})}>; rel="last"')
        if page > 1:
            links.append(f'<{base}?{urlencode({"per_page": per_page, "page": 1})}>; rel="first"')
            links.append(f'<{base}?{urlencode({"per_page": per_page, "page": page - 1})}>; rel="prev"')
        chunk = everything[(page - 1) * per_page : page * per_page]
        return 200, [self._comment_json(c) for c in chunk], ({"Link": ", ".join(links)} if links else {})

    def _create_comment(self, full_name: str, repo: dict, number: str, login: str, payload: dict):
        self._issue(repo, number)
        if not isinstance(payload.get("body"), str) or not payload["body"]:
            raise ApiError(422, "Validation Failed")
        comment = self.add_comment(full_name, int(number), login, payload["body"])
        return 201, self._comment_json(comment), {}

    def _edit_comment(self, full_name: str, comment_id: str, login: str, payload: dict):
        comment = self._stored(full_name, comment_id)
        if comment["author"] != login and self.repos[full_name]["roles"].get(login) not in WRITE_ROLES:
            raise ApiError(403, "Must have admin rights to Repository.")
        comment["history"].append(comment["body"])
        comment["body"] = payload["body"]
        return 200, self._comment_json(comment), {}

    def _delete_comment(self, full_name: str, comment_id: str, login: str):
        comment = self._stored(full_name, comment_id)
        if comment["author"] != login and self.repos[full_name]["roles"].get(login) not in WRITE_ROLES:
            raise ApiError(403, "Must have admin rights to Repository.")
        del self.comments[comment["id"]]
        return 204, None, {}

    def _react(self, full_name: str, comment_id: str, login: str, payload: dict):
        comment = self._stored(full_name, comment_id)
        for reaction in self.reactions:
            if (reaction["comment_id"], reaction["user"], reaction["content"]) == (
                comment["id"],
                login,
                payload["content"],
            ):
                return 200, self._reaction_json(reaction), {}
        reaction = {
            "id": next(self._ids),
            "comment_id": comment["id"],
            "user": login,
            "content": payload["content"],
        }
        self.reactions.append(reaction)
        return 201, self._reaction_json(reaction), {}

    def _reaction_json(self, reaction: dict) -> dict:
        return {
            "id": reaction["id"],
            "node_id": f"REA_{reaction['id']}",
            "user": self._user_json(reaction["user"]),
            "content": reaction["content"],
            "created_at": TIMESTAMP,
        }

    def _permission(self, repo: dict, login: str) -> dict:
        if login not in {u["login"] for u in self.users.values()} and login not in repo["roles"]:
            raise ApiError(404, "Not Found")
        role = repo["roles"].get(login) or ("none" if repo["private"] else "read")
        return {
            "permission": LEGACY_PERMISSION.get(role, "none"),
            "role_name": role,
            "user": self._user_json(login),
        }

    def _pull(self, full_name: str, number: str) -> dict:
        for pull in self.pulls:
            if pull["repo"] == full_name and pull["number"] == int(number):
                return pull
        raise ApiError(404, "Not Found")

    def _list_pulls(self, full_name: str, query: dict):
        owner = full_name.split("/")[0]
        state = query.get("state", "open")
        chosen = [
            p
            for p in self.pulls
            if p["repo"] == full_name
            and (state == "all" or p["state"] == state)
            and ("head" not in query or query["head"] == f"{owner}:{p['head']}")
            and ("base" not in query or query["base"] == p["base"])
        ]
        return 200, [self._pull_json(p) for p in chosen], {}

    def _create_pull(self, full_name: str, login: str, payload: dict):
        head, base = payload.get("head"), payload.get("base")
        if not head or not base or head == base:
            raise ApiError(422, "Validation Failed")
        owner = full_name.split("/")[0]
        if any(
            p["repo"] == full_name and p["state"] == "open" and (p["head"], p["base"]) == (head, base)
            for p in self.pulls
        ):
            raise ApiError(422, f"A pull request already exists for {owner}:{head}.")
        number = max([p["number"] for p in self.pulls] + list(self.repos[full_name]["issues"]) + [0]) + 1
        pull = {
            "repo": full_name,
            "number": number,
            "state": "open",
            "title": payload.get("title", ""),
            "body": payload.get("body") or "",
            "head": head,
            "base": base,
            "author": login,
        }
        self.pulls.append(pull)
        return 201, self._pull_json(pull), {}

    def _edit_pull(self, full_name: str, number: str, payload: dict):
        pull = self._pull(full_name, number)
        for key in ("title", "body", "state"):
            if key in payload:
                pull[key] = payload[key]
        return 200, self._pull_json(pull), {}


def _handler_for(api: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            authorization = self.headers.get("Authorization", "")
            token = authorization.split(" ", 1)[1] if " " in authorization else None
            try:
                status, body, headers = api.handle(
                    self.command, self.path, token, json.loads(raw) if raw else {}
                )
            except _Dropped:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            except ApiError as error:
                status, headers = error.status, error.headers
                body = {"message": error.message, "documentation_url": "https://docs.github.com/rest"}
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            try:
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a slow endpoint under test): as GitHub, answer no one

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            """Quiet: the store's ``requests`` list is the log."""

    return Handler


class GitHttpServer:
    """Bare repositories under ``root`` served over smart HTTP on 127.0.0.1 (a random port, in a thread),
    answering only requests that authenticate as ``x-access-token:<token>``. While it serves a request it
    looks at every process's command line: ``leaks`` lists the ones that showed the token."""

    def __init__(self, root: Path, token: str) -> None:
        self.root, self.token = root, token
        credentials = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self._expected = f"Basic {credentials}"
        self.authorized: list[str] = []  # paths requested with the right credentials
        self.refused = 0
        self.leaks: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _git_handler_for(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def start(self) -> GitHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def clone_url(self, full_name: str) -> str:
        return f"{self.url}/{full_name}.git"

    def look_for_leaks(self) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                command_line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if self.token in command_line:
                self.leaks.append(command_line)


def _git_handler_for(server: GitHttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            server.look_for_leaks()
            if self.headers.get("Authorization") != server._expected:
                server.refused += 1
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            server.authorized.append(path)
            body = self._body()
            env = {
                "PATH": os.environ.get("PATH", ""),
                "GIT_PROJECT_ROOT": str(server.root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REMOTE_USER": "x-access-token",
                "REMOTE_ADDR": "127.0.0.1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            }
            output = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=60, check=False
            ).stdout
            head, _, payload = output.partition(b"\r\n\r\n")
            status = 200
            self.close_connection = True
            lines = head.decode("latin-1").split("\r\n")
            for line in lines:
                if line.lower().startswith("status:"):
                    status = int(line.split(":", 1)[1].split()[0])
            self.send_response(status)
            for line in lines:
                key, _, value = line.partition(":")
                if key and key.lower() != "status":
                    self.send_header(key, value.strip())
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            """Quiet."""

    return Handler


@pytest.fixture
def github_server() -> Iterator[FakeGitHub]:
    """A started :class:`FakeGitHub`; stopped after the test."""
    server = FakeGitHub().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bare_remote(tmp_path: Path) -> Path:
    """An empty bare git repository (default branch ``main``) to push to."""
    path = tmp_path / "remote.git"
    git.Repo.init(path, bare=True, initial_branch="main")
    return path
