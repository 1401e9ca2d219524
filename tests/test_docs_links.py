"""Every relative link of the README, the reference in ``docs/`` and ``reports/README.md`` resolves: the file or
folder exists, relative to the page that links it, and an anchor into a Markdown page names one of its headings
by GitHub's rule. A planted broken link and a planted bad anchor are flagged, so the check can fail."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)


def pages() -> list[Path]:
    """The pages checked: the README, every Markdown page under ``docs/``, and the reports' index."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "reports" / "README.md"]


def prose(text: str) -> str:
    """``text`` without fenced code blocks, inline code spans kept as plain words (``[`x`](y)`` is a link, a link
    written inside code is not)."""
    text = FENCE.sub("", text)
    return CODE_SPAN.sub(lambda m: m.group(2).replace("[", "(").replace("]", ")"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: links by their text, then lowercase, every character that is not a
    letter, digit, space, hyphen or underscore removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown page's headings (not of ``#`` lines in code blocks); a repeated slug gets
    ``-1``, ``-2``, ... as on GitHub."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, title in HEADING.findall(FENCE.sub("", text)):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(text: str, page: Path) -> list[str]:
    """Every relative link of ``text`` (the content of ``page``) that does not resolve, with the reason."""
    problems = []
    for _, target in LINK.findall(prose(text)):
        if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http(s):, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        if not path:  # an anchor on the page itself
            if anchor not in anchors(text):
                problems.append(f"{target}: no heading of {page.name} has the anchor #{anchor}")
            continue
        dest = (page.parent / path).resolve()
        if not dest.exists():
            problems.append(f"{target}: no such file {dest}")
        elif anchor and dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest.read_text()):
            problems.append(f"{target}: no heading of {dest.name} has the anchor #{anchor}")
    return problems


def test_every_link_of_the_readme_docs_and_reports_index_resolves():
    problems = []
    for page in pages():
        assert page.exists(), page
        problems += [f"{page.relative_to(REPO)}: {p}" for p in broken_links(page.read_text(), page)]
    assert not problems, "\n".join(problems)


def test_the_pages_checked_link_a_lot():
    # the check is not vacuous: the README links into docs/ and reports/, and docs/ links everywhere
    readme = [t for _, t in LINK.findall(prose((REPO / "README.md").read_text()))]
    assert any(t.startswith("docs/cli/README.md#") for t in readme)
    assert any(t.startswith("reports/") for t in readme)
    assert sum(len(LINK.findall(prose(p.read_text()))) for p in pages()) > 200


def test_a_planted_broken_link_and_a_planted_bad_anchor_are_flagged(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "target.md").write_text(
        "# Target page\n\n## `specproof certify`: an exact certificate\n\n## Notes\n\n## Notes\n\n"
        "```bash\n# a comment, not a heading\n```\n")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "case.json").write_text("{}")
    page = tmp_path / "README.md"
    good = ("[a](docs/target.md) [b](docs/target.md#specproof-certify-an-exact-certificate) "
            "[c](docs/target.md#notes-1) [d](examples/case.json) [e](examples/) [f](https://example.com/x#y) "
            "[g](#own-heading)\n\n# Own heading\n\n`[not a link](nowhere.md)`\n\n```\n[nor this](nowhere.md)\n```\n")
    assert broken_links(good, page) == []
    bad = good + "[h](docs/missing.md) [i](docs/target.md#no-such-heading) [j](docs/target.md#notes-2) " \
                 "[k](docs/target.md#a-comment-not-a-heading) [l](#elsewhere)\n"
    problems = broken_links(bad, page)
    assert len(problems) == 5, problems
    assert "docs/missing.md: no such file" in problems[0]
    assert all("no heading" in p for p in problems[1:])


def test_github_slugs():
    assert slug("TRV's exact recursion (`--method recursion`)") == "trvs-exact-recursion---method-recursion"
    assert slug("`specproof gate --config specproof.toml`") == "specproof-gate---config-specprooftoml"
    assert slug("`CASE.json`: one fixed tree") == "casejson-one-fixed-tree"
    assert slug("Wall clock: `--timeout` (default 1800 s)") == "wall-clock---timeout-default-1800-s"
    assert slug("Single-step rules (one node, candidates `X_1 … X_k`, rows `p` and `q`)") == \
        "single-step-rules-one-node-candidates-x_1--x_k-rows-p-and-q"
    assert anchors("# A\n## A\n## A\n") == {"a", "a-1", "a-2"}
