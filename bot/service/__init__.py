"""``bot serve`` and ``bot handle-event``: the webhook server (``server``) and what turns a ``/bot`` comment into
a checked, locked run (``dispatch``)."""
