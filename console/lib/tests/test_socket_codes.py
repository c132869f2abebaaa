"""The pages stop reconnecting on exactly the close codes the consumers refuse with: the numbers
in static/js/live_socket.js are the ones in console.lib.sockets (a page that missed a change would
reconnect forever after a refusal)."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from console.lib.sockets import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED


def test_the_live_socket_script_stops_on_the_consumers_refusal_codes():
    script = (Path(settings.BASE_DIR) / "static" / "js" / "live_socket.js").read_text()
    constants = dict(re.findall(r"const (SESSION_ENDED|NOT_FOUND) = (\d+);", script))
    assert constants == {"SESSION_ENDED": str(CLOSE_UNAUTHENTICATED), "NOT_FOUND": str(CLOSE_NOT_FOUND)}
