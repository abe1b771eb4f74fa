"""The README's first screen (the two commands, the picture of the report) and every relative link of the README
and docs/ resolving to a file and, with an anchor, to a heading of it."""

from __future__ import annotations

import glob
import os
import re

from repo import ROOT

README = os.path.join(ROOT, "README.md")
PICTURE = "docs/images/report.png"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def without_code(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(path: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than '-' and '_' dropped, spaces as '-'."""
    headings = re.findall(r"^#+ (.*)$", without_code(read(path)), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_first_screen_gives_the_two_commands_then_the_picture_and_ci_runs_the_test_command():
    readme = read(README)
    commands = re.findall(r"^```bash\n(.*?)\n```", readme, re.S | re.M)[:2]
    assert [c.split("#")[0].strip() for c in commands] == ["bash scripts/run-local.sh", "bash scripts/test.sh"]
    assert readme.index(commands[1]) < readme.index(f'src="{PICTURE}"') < readme.index("## Where to go next")
    ci = [line for line in read(os.path.join(ROOT, ".ci", "run")).splitlines() if line and not line.startswith("#")]
    assert ci[-1] == "bash scripts/test.sh"
    with open(os.path.join(ROOT, PICTURE), "rb") as f:
        picture = f.read()
    assert picture.startswith(PNG_SIGNATURE) and len(picture) < 300_000


def test_every_relative_link_in_the_readme_and_docs_resolves():
    broken = []
    for page in [README, *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
        for link in re.findall(r"\]\(([^)\s]+)\)|src=\"([^\"]+)\"", without_code(read(page))):
            link = link[0] or link[1]
            if re.match(r"[a-z]+:", link):
                continue
            target, _, anchor = link.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
            if not os.path.exists(path):
                broken.append(f"{os.path.relpath(page, ROOT)}: {link} (no such file)")
            elif anchor and path.endswith(".md") and anchor not in anchors(path):
                broken.append(f"{os.path.relpath(page, ROOT)}: {link} (no such heading)")
    assert broken == []
