"""Reading pages the way a user sees them: which message stands next to which field."""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _ErrorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []  # (tag, id)
        self.current: tuple[str, str] | None = None  # (data-error-for, container id) while inside an error
        self.text = ""
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in VOID:
            return
        if tag == "p" and "data-error-for" in attrs:
            containers = [eid for _, eid in self.stack if eid.startswith(("field-", "area-"))]
            self.current = (attrs["data-error-for"], containers[-1] if containers else "")
            self.text = ""
        self.stack.append((tag, attrs.get("id") or ""))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        while self.stack:
            open_tag, _ = self.stack.pop()
            if open_tag == tag:
                break
        if tag == "p" and self.current:
            self.found.append((*self.current, self.text.strip()))
            self.current = None

    def handle_data(self, data):
        if self.current:
            self.text += data


def field_errors(html: str | bytes) -> dict[str, list[str]]:
    """{field: [messages]} of the messages rendered next to their field (inside its container).

    A message whose container is not the field's own (`field-<name>`, or the `area-tags`
    fieldset for tags) is reported under "misplaced:<field>", so a test sees the mistake.
    """
    parser = _ErrorParser()
    parser.feed(html.decode() if isinstance(html, bytes) else html)
    errors: dict[str, list[str]] = {}
    for field, container, message in parser.found:
        expected = {f"field-{field}", "area-tags"} if field == "tags" else {f"field-{field}"}
        key = field if container in expected else f"misplaced:{field}"
        errors.setdefault(key, []).append(message)
    return errors
