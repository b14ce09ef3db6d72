"""The documents point at what exists, and only inside the repository (issue 22).

README.md is one page; the pages it hands over to — ARCHITECTURE.md first — name real files. A path is
written from the repository root, except that ``support_agent/…`` is under ``layers/common/`` and the
package's own directories and modules (``agent/loop.py``, ``store/turns.py``, ``auth.py``) are under
``layers/common/support_agent/``. What counts as a path: an inline code span or a line of a plain code
block that is a file name with a known extension, or a relative path whose first directory is one of the
repository's or the package's. Links must be relative, resolve to a file, and name a heading that exists.
The layout in docs/DEVELOPING.md must list every module of the layer, every function and every devstack
module, and nothing that is not there.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "common" / "support_agent"
README_MAX_BYTES = 8_500
CHECKED = ("README.md", "docs/ARCHITECTURE.md", "docs/API.md", "docs/DEVELOPING.md", "docs/MODEL.md")
ROOTS = (REPO, REPO / "layers" / "common", LAYER)
EXTENSIONS = {"py", "md", "json", "yaml", "yml", "toml", "js", "html", "css", "txt", "sh"}
# Made by make targets and git-ignored: named in the documents, absent from a clone.
# Directories end in "/" (how git matches a directory that does not exist yet).
GENERATED = (
    ".devstack/env.json",
    ".venv/",
    ".venv-sam/",
    ".aws-sam/build",
    "bench/.venv-peers/",
    "bench/.venv-lambda/",
)
# Look like paths, are not: MCP's JSON-RPC methods.
NOT_PATHS = {"tools/list", "tools/call"}
FENCE = re.compile(r"^```(\w*)\s*$")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
URL = re.compile(r"https?://")
PATHLIKE = re.compile(r"^[\w.\-/]+$")
# Deeper than any name in a layout block: a description's continuation line.
CONTINUATION_INDENT = 12


def _known_dirs() -> set[str]:
    top = {p.name for p in REPO.iterdir() if p.is_dir()}
    package = {p.name for p in LAYER.iterdir() if p.is_dir() and p.name != "__pycache__"}
    return top | package | {"support_agent"}


KNOWN_DIRS = _known_dirs()


def text_of(doc: str) -> str:
    return (REPO / doc).read_text(encoding="utf-8")


def split(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The prose lines, and each fenced block as (language, lines)."""
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        fence = FENCE.match(line.strip())
        if current is None and fence:
            current = (fence.group(1), [])
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
        else:
            prose.append(line)
    assert current is None, "an unclosed code block"
    return prose, blocks


def is_path(token: str) -> bool:
    if not PATHLIKE.match(token) or token.startswith(("/", "-")) or "//" in token or token in NOT_PATHS:
        return False
    name = token.rstrip("/").rsplit("/", 1)[-1]
    if "." in name and name.rsplit(".", 1)[1] in EXTENSIONS:
        return True
    return "/" in token and token.split("/", 1)[0] in KNOWN_DIRS


def generated(token: str) -> bool:
    return any(token.rstrip("/") == g.rstrip("/") or token.startswith(g.rstrip("/") + "/") for g in GENERATED)


def resolves(token: str) -> bool:
    return any((root / token).exists() for root in ROOTS)


def inline_paths(doc: str) -> Iterator[str]:
    prose, _ = split(text_of(doc))
    for line in prose:
        for span in CODE_SPAN.findall(line):
            token = span.strip().split("#", 1)[0]
            if is_path(token) and not generated(token):
                yield token


def layout_paths(lines: list[str]) -> list[str]:
    """The paths a plain code block lays out as a tree: a name ending in ``/`` opens a directory for the
    deeper lines under it; names that are not paths (a diagram's words) are skipped."""
    out: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent > CONTINUATION_INDENT:
            continue
        name = line.split()[0]
        if not (is_path(name) or (name.endswith("/") and PATHLIKE.match(name))):
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] if stack else "") + name
        out.append(path)
        if name.endswith("/"):
            stack.append((indent, path))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = split(path.read_text(encoding="utf-8"))
    return {slug(line.lstrip("#")) for line in prose if re.match(r"^#{1,6} ", line)}


# ------------------------------------------------------------------ the README


def test_readme_is_one_page() -> None:
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_readme_keeps_the_two_commands_ci_runs() -> None:
    _, blocks = split(text_of("README.md"))
    commands = [line.split("#")[0].strip() for lang, lines in blocks if lang == "sh" for line in lines]
    assert {"make dev", "make test"} <= set(commands)
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()


# ------------------------------------------------------------------ paths and links


@pytest.mark.parametrize("doc", CHECKED)
def test_every_named_path_exists(doc: str) -> None:
    named = set(inline_paths(doc))
    _, blocks = split(text_of(doc))
    for lang, lines in blocks:
        if lang == "":
            named.update(p for p in layout_paths(lines) if not generated(p))
    assert named, f"{doc} names no path: is the path pattern still right?"
    missing = sorted(p for p in named if not resolves(p))
    assert not missing, f"{doc} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", CHECKED)
def test_links_stay_in_the_repository_and_resolve(doc: str) -> None:
    prose, _ = split(text_of(doc))
    base = (REPO / doc).parent
    broken: list[str] = []
    for line in prose:
        outside_code = CODE_SPAN.sub("", line)
        assert not URL.search(outside_code), f"{doc} points outside the repository: {line.strip()}"
        for target in LINK.findall(outside_code):
            file, _, anchor = target.partition("#")
            path = (base / file).resolve() if file else REPO / doc
            if REPO not in path.parents and path != REPO:
                broken.append(f"{target} (outside the repository)")
            elif not path.exists():
                broken.append(f"{target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{target} (no such heading)")
    assert not broken, f"{doc}: {broken}"


def test_no_file_points_to_a_sibling_checkout() -> None:
    """No file of the repository may point outside it (the development setup's shared directory included)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    needle = b".." + b"/shared"
    files = [REPO / name for name in listed.decode().split("\0") if name]
    offenders = [str(f.relative_to(REPO)) for f in files if f.is_file() and needle in f.read_bytes()]
    assert len(files) > 100
    assert not offenders, offenders


def test_generated_paths_are_ignored_by_git() -> None:
    """The paths the documents may name without their existing are ones `make` creates and git ignores."""
    try:
        out = subprocess.run(
            ["git", "check-ignore", "--no-index", *GENERATED], cwd=REPO, capture_output=True, text=True, check=False
        )
    except OSError:
        pytest.skip("no git")
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert set(out.stdout.split()) == set(GENERATED)


# ------------------------------------------------------------------ the architecture document


def test_every_rule_names_the_file_that_enforces_it() -> None:
    text = text_of("docs/ARCHITECTURE.md")
    section = text.split("## The rules the whole system keeps", 1)[1].split("\n## ", 1)[0]
    rules = [r for r in re.split(r"\n(?=\d+\. )", section) if re.match(r"\d+\. ", r)]
    assert len(rules) >= 7, "the rules section lost its numbered rules"
    for rule in rules:
        head = rule.splitlines()[0][:60]
        assert "*Enforced in*" in rule, f"rule without its enforcing file: {head}"
        enforced = rule.split("*Enforced in*", 1)[1].split("*Checked by*", 1)[0]
        paths = [s for s in CODE_SPAN.findall(enforced) if is_path(s)]
        assert paths, f"rule {head} names no enforcing file"
        assert all(resolves(p) for p in paths), (head, [p for p in paths if not resolves(p)])


def test_the_data_model_names_every_key_prefix_the_stores_write() -> None:
    """Each literal key prefix in the layer (``"HELD#…"``, ``f"note#{…}"``) appears in ARCHITECTURE.md."""
    text = text_of("docs/ARCHITECTURE.md")
    prefixes: set[str] = set()
    for module in LAYER.rglob("*.py"):
        source = module.read_text(encoding="utf-8")
        prefixes.update(re.findall(r"""f?["']([A-Za-z]+#)(?:\{|["'])""", source))
    assert {"turn#", "idem#", "note#", "rate#", "mcp#", "REFUND#", "HELD#", "WEBHOOK#", "call#"} <= prefixes
    missing = sorted(p for p in prefixes if p not in text)
    assert not missing, f"ARCHITECTURE.md's data model lacks {missing}"


# ------------------------------------------------------------------ the layout


def documented_layout() -> set[str]:
    text = text_of("docs/DEVELOPING.md")
    after = text.split("## Layout", 1)[1]
    _, blocks = split(after)
    return set(layout_paths(blocks[0][1]))


def test_layout_lists_what_is_there() -> None:
    documented = documented_layout()
    missing = sorted(p for p in documented if not (REPO / p).exists())
    assert not missing, f"DEVELOPING.md's layout lists what does not exist: {missing}"


def test_layout_lists_every_module() -> None:
    documented = documented_layout()

    def files(root: Path, *patterns: str) -> set[str]:
        return {
            str(p.relative_to(REPO))
            for pattern in patterns
            for p in root.rglob(pattern)
            if "__pycache__" not in p.parts
        }

    expected = (
        files(LAYER, "*.py")
        | files(REPO / "devstack", "*.py", "*.json")
        | {str(p.relative_to(REPO)) for p in (REPO / "functions").glob("*/app.py")}
        | {f"tests/{p.name}/" for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    )
    assert len(expected) > 150
    undocumented = sorted(expected - documented)
    assert not undocumented, f"add these to the layout in docs/DEVELOPING.md: {undocumented}"
