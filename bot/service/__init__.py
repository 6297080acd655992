"""``bot serve`` and ``bot handle-event``: the webhook server (``server``), the durable delivery queue and the
workers that check and run what it holds (``queue``), what turns a ``/bot`` comment into a checked, locked run
(``dispatch``), what a reply may say (``replies``), and the one log line each delivery event leaves
(``delivery_log``)."""
