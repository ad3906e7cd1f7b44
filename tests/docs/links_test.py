#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md names a file that exists (and, for a heading
anchor in a Markdown file, a heading that exists), and docs/README.md lists every docs page.

Usage: links_test.py SOURCE_DIR
"""
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def without_code_blocks(text):
    return FENCE.sub("", text)


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen = {}
    result = set()
    for line in without_code_blocks(open(path, encoding="utf-8").read()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def main():
    root = os.path.abspath(sys.argv[1])
    docs = os.path.join(root, "docs")
    pages = [os.path.join(root, "README.md")] + sorted(
        os.path.join(docs, name) for name in os.listdir(docs) if name.endswith(".md"))
    problems = []
    checked = 0
    for page in pages:
        text = without_code_blocks(open(page, encoding="utf-8").read())
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            checked += 1
            path, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            label = f"{os.path.relpath(page, root)}: ({target})"
            if not os.path.exists(where):
                problems.append(f"{label}: {os.path.relpath(where, root)} does not exist")
            elif anchor and where.endswith(".md") and anchor not in anchors(where):
                problems.append(f"{label}: no heading with anchor #{anchor}")
    index = open(os.path.join(docs, "README.md"), encoding="utf-8").read()
    for page in pages[1:]:
        name = os.path.basename(page)
        if name != "README.md" and f"]({name})" not in index:
            problems.append(f"docs/README.md: {name} is not listed")
    for problem in problems:
        print("FAIL " + problem)
    print(f"{checked} relative links in {len(pages)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
