"""Shared pytest fixtures."""

from github_server import bare_remote, github_server  # noqa: F401  (fixtures: the local GitHub API, a git remote)
