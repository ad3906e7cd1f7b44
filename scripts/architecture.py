#!/usr/bin/env python3
"""The architecture map, from the tree: each src/ folder, its purpose, what it imports.

The layers and purposes are declared once, in src/modules.txt; what each module imports is read
from the tree (its #include lines and the tessera_* libraries its CMakeLists.txt links). Then:

  python3 scripts/architecture.py            # prints docs/architecture.md as the tree says
  python3 scripts/architecture.py --write    # rewrites docs/architecture.md
  python3 scripts/architecture.py --check    # exit 1, naming each offence, when
        - a module includes or links a module of its own layer or above (imports point down only),
        - a src/ folder with a CMakeLists.txt is missing from src/modules.txt (or listed but absent),
        - an executable (a `main` or add_executable) lives outside src/programs/,
        - a program's composition root is longer than 150 lines,
        - a function in src/ is longer than 80 lines without a `// long:` reason above it,
        - docs/architecture.md differs from what the tree says.
"""
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
MODULES_FILE = SRC / "modules.txt"
MAP_FILE = ROOT / "docs" / "architecture.md"


def set_root(root):
    """Points the script at another checkout (`--root DIR`; tests check a doctored copy)."""
    global ROOT, SRC, MODULES_FILE, MAP_FILE
    ROOT = pathlib.Path(root).resolve()
    SRC = ROOT / "src"
    MODULES_FILE = SRC / "modules.txt"
    MAP_FILE = ROOT / "docs" / "architecture.md"
PROGRAMS = "programs"
MAX_ROOT_LINES = 150
MAX_FUNCTION_LINES = 80

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
MAIN = re.compile(r"^\s*int\s+(?:main|wmain)\s*\(", re.M)
ADD_LIBRARY = re.compile(r"add_library\(\s*([A-Za-z0-9_]+)")
ADD_EXECUTABLE = re.compile(r"add_executable\(\s*([A-Za-z0-9_-]+)")
LINK = re.compile(r"target_link_libraries\(\s*([A-Za-z0-9_-]+)([^)]*)\)", re.S)
TESSERA_TARGET = re.compile(r"\btessera_[a-z0-9_]+\b")
SOURCES = (".cc", ".h", ".cpp", ".hpp")


def read_modules():
    """[(layer, folder, purpose)] from src/modules.txt: `<layer> <folder> <purpose...>` lines."""
    modules = []
    for number, line in enumerate(MODULES_FILE.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[0].isdigit():
            sys.exit(f"src/modules.txt:{number}: expected `<layer> <folder> <purpose>`")
        modules.append((int(parts[0]), parts[1].rstrip("/"), parts[2]))
    return modules


def module_dirs():
    """Every folder under src/ with a CMakeLists.txt, relative to src/."""
    found = set()
    for path in SRC.rglob("CMakeLists.txt"):
        folder = str(path.parent.relative_to(SRC))
        # Each program's folder belongs to the one programs layer.
        found.add(PROGRAMS if folder.startswith(PROGRAMS + "/") else folder)
    found.discard(".")
    return sorted(found)


def owner(path, folders):
    """The module a path under src/ belongs to: the longest listed folder that contains it."""
    best = None
    for folder in folders:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def own_files(folder, folders):
    """The module's source files (not those of a nested module)."""
    for path in sorted((SRC / folder).rglob("*")):
        if path.suffix in SOURCES and owner(str(path.relative_to(SRC).parent), folders) == folder:
            yield path


def library_owners(folders):
    """tessera_* library target -> module folder that defines it."""
    owners = {}
    for folder in folders:
        cmake = SRC / folder / "CMakeLists.txt"
        for target in ADD_LIBRARY.findall(cmake.read_text()):
            owners[target] = folder
    return owners


def imports_of(folder, folders, libraries):
    """{imported module: [how, ...]} for one module: includes and links of other modules."""
    found = {}
    for path in own_files(folder, folders):
        for included in INCLUDE.findall(path.read_text(errors="replace")):
            target = owner(str(pathlib.PurePosixPath(included).parent), folders)
            if target and target != folder and (SRC / included).exists():
                found.setdefault(target, []).append(f"{path.relative_to(ROOT)} includes {included}")
    cmake = SRC / folder / "CMakeLists.txt"
    for _, linked in LINK.findall(cmake.read_text()):
        for library in TESSERA_TARGET.findall(linked):
            target = libraries.get(library)
            if target and target != folder:
                found.setdefault(target, []).append(f"{cmake.relative_to(ROOT)} links {library}")
    return found


def offences(modules, folders, libraries):
    layer = {folder: rank for rank, folder, _ in modules}
    listed = set(layer)
    problems = []
    for folder in sorted(set(module_dirs()) - listed):
        problems.append(f"src/{folder}: has a CMakeLists.txt but no line in src/modules.txt")
    for folder in sorted(listed - set(module_dirs())):
        problems.append(f"src/modules.txt lists {folder}, which has no src/{folder}/CMakeLists.txt")
    for folder in folders:
        for target, how in sorted(imports_of(folder, folders, libraries).items()):
            if layer[target] >= layer[folder]:
                problems.append(f"{folder} (layer {layer[folder]}) imports {target} "
                                f"(layer {layer[target]}): {how[0]}")
        is_program = folder == PROGRAMS or folder.startswith(PROGRAMS + "/")
        if is_program:
            continue
        for path in own_files(folder, folders):
            if MAIN.search(path.read_text(errors="replace")):
                problems.append(f"{path.relative_to(ROOT)}: a main outside src/{PROGRAMS}/")
        for name in ADD_EXECUTABLE.findall((SRC / folder / "CMakeLists.txt").read_text()):
            problems.append(f"src/{folder}/CMakeLists.txt: executable {name} outside src/{PROGRAMS}/")
    problems += long_functions()
    for main in sorted((SRC / PROGRAMS).rglob("main.cc")):
        lines = len(main.read_text().splitlines())
        if lines > MAX_ROOT_LINES:
            problems.append(f"{main.relative_to(ROOT)}: {lines} lines, a composition root has at "
                            f"most {MAX_ROOT_LINES}")
    return problems


def long_functions():
    """Functions over MAX_FUNCTION_LINES lines (Universal Ctags' start and end lines), unless the
    line above the function's first line is a comment starting `// long:` that gives the reason."""
    try:
        listing = subprocess.run(
            ["ctags", "-R", "--fields=+ne", "--c++-kinds=f", "--output-format=json", "-f", "-",
             str(SRC)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        return [f"ctags (universal-ctags) is needed to measure functions: {error}"]
    problems = []
    for line in listing.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or tag.get("kind") != "function" or "end" not in tag:
            continue
        length = tag["end"] - tag["line"] + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        path = pathlib.Path(tag["path"])
        lines = path.read_text(errors="replace").splitlines()
        first = tag["line"] - 1
        if first >= 1 and lines[first - 1].lstrip().startswith("template"):
            first -= 1
        above = lines[first - 1].strip() if first >= 1 else ""
        if above.startswith("// long:"):
            continue
        problems.append(f"{path.relative_to(ROOT)}:{tag['line']}: {tag['name']} is {length} lines "
                        f"(at most {MAX_FUNCTION_LINES}, or a `// long:` reason above it)")
    return problems


def render(modules, folders, libraries):
    out = [
        "# Architecture map",
        "",
        "Generated by `python3 scripts/architecture.py --write` from `src/modules.txt` (layers and",
        "purposes) and the tree (each module's `#include` lines and the libraries it links); the test",
        "`architecture_map_test` fails when this page and the tree disagree, when a module imports one",
        "of its own layer or above, or when an executable lives outside `src/programs/`.",
        "",
        "Layer 0 is the bottom. A module imports only modules of lower layers; programs, on top, wire",
        "modules together and hold nothing else.",
        "",
        "| layer | folder | purpose | imports |",
        "|---|---|---|---|",
    ]
    for rank, folder, purpose in sorted(modules, key=lambda m: (m[0], m[1])):
        if folder not in folders:
            continue
        imported = sorted(imports_of(folder, folders, libraries))
        names = ", ".join(f"`{name}`" for name in imported) or "—"
        out.append(f"| {rank} | `src/{folder}/` | {purpose} | {names} |")
    return "\n".join(out) + "\n"


def main(argv):
    if "--root" in argv:
        set_root(argv[argv.index("--root") + 1])
    modules = read_modules()
    present = set(module_dirs())
    folders = [folder for _, folder, _ in modules if folder in present]
    libraries = library_owners(folders)
    text = render(modules, folders, libraries)
    if "--write" in argv:
        MAP_FILE.write_text(text)
        return 0
    if "--check" in argv:
        problems = offences(modules, folders, libraries)
        if not MAP_FILE.exists() or MAP_FILE.read_text() != text:
            problems.append("docs/architecture.md is out of date: python3 scripts/architecture.py --write")
        for problem in problems:
            print(problem)
        print(f"{len(folders)} modules, {len(problems)} offences")
        return 1 if problems else 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
