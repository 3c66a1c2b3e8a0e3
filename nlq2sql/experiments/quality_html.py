"""The quality report's self-contained HTML page from its own Markdown subset (tables, headings,
`code`, **bold**), escaped, with the inline plots; no Markdown library needed."""

from __future__ import annotations

import html
import re

__all__ = ["page"]


def _inline(text: str) -> str:
    """Escape, then the two inline marks the report uses (`code`, **bold**) as tags."""
    t = html.escape(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)


def _md_table_html(lines: list[str]) -> str:
    """The Markdown tables and lines above, as escaped HTML."""
    out, in_table = [], False
    for line in lines:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            if set(line) <= set("|-"):
                continue
            tag = "th" if not in_table else "td"
            if not in_table:
                out.append("<table>")
                in_table = True
            out.append("<tr>" + "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line.lstrip('# '))}</h{level}>")
        elif line.strip():
            out.append(f"<p>{_inline(line.removeprefix('- '))}</p>")
    if in_table:
        out.append("</table>")
    return "\n".join(out)


def page(md: str, figs: dict[str, str]) -> str:
    """One HTML page: the report's Markdown as HTML, then each plot (base64 PNG) under its title;
    no remote resource (a Content-Security-Policy allows inline images and styles only)."""
    imgs = "".join(f'<h2>{html.escape(k)}</h2><img alt="{html.escape(k)}" src="data:image/png;base64,{v}">'
                   for k, v in figs.items())
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\"><title>nlq2sql quality report</title>"
            "<style>body{font-family:sans-serif;max-width:1400px}table{border-collapse:collapse;font-size:12px}"
            "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}code{background:#f3f3f3}</style></head>"
            "<body>" + _md_table_html(md.splitlines()) + imgs + "</body></html>\n")
