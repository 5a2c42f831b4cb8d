"""{{ bytes|size }} and {{ bytes|size_exact }}: portal.storage.quota.size_text, one unit rule (KiB, MiB, GiB) for
the pages, the messages, upload.js and the CLI."""

from django import template

from portal.storage.quota import size_text

register = template.Library()


@register.filter
def size(value) -> str:
    return "" if value is None or value == "" else size_text(int(value))


@register.filter
def size_exact(value) -> str:
    return "" if value is None or value == "" else size_text(int(value), exact=True)
