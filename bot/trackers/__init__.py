"""Where the bot's comments live: the :class:`~bot.trackers.base.Tracker` protocol and the comment markers
(``base``), and its two backends, GitHub through PyGithub (``github``) and files under ``.bot/`` (``local``)."""
