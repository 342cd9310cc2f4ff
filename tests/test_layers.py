"""The import layers of DESIGN.md, checked by parsing the code (nothing is imported).

Every import counts: top-level, inside functions and under ``TYPE_CHECKING``. A
lazy import hides a cycle from the interpreter, not from the reader.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# trainers/grpo/<folder>: the sibling folders it may import (REDESIGN.md §2, "may import").
# A folder imports nothing else of trainers.grpo; the top-level modules (trainer, config,
# cli, __init__) may import anything.
# trainers.grpo.LAYERS, bottom to top: a folder imports only folders below it, except that sync/
# (the one upstream write, trainer -> inference server) imports no sibling folder at all.
ALLOWED = {
    "algo": set(),
    "dist": {"algo"},
    "data": {"algo", "dist"},
    "learn": {"algo", "dist", "data"},
    "sync": set(),
    "ray": {"algo", "dist", "data", "learn", "sync"},
    "run": {"algo", "dist", "data", "learn", "sync", "ray"},
}
LAYER = ("verifiers.compat", "verifiers.utils", "verifiers.scripts")  # the 0.1.x layer on top of the core
TRAINERS_ENTRY = "verifiers.compat.training"  # the one verifiers module that may import trainers


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for pkg in ("verifiers", "trainers") for p in sorted((ROOT / pkg).rglob("*.py"))}


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(name: str) -> list[tuple[str, int]]:
    """(project module, line) for every import statement in the module, wherever it sits."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            anchor = package.rsplit(".", node.level - 1)[0] if node.level else ""  # `from ..x import y`
            base = ".".join(filter(None, [anchor, node.module]))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # `import a.b.c` where only a.b is ours
                target = target.rpartition(".")[0]
            # a module importing itself is the `python -m` idiom (`__main__` imports the real module)
            if target and target != name and (target, node.lineno) not in found:
                found.append((target, node.lineno))
    return found


EDGES = {name: _imports(name) for name in MODULES}


def _show(edges: list[tuple[str, str, int]]) -> str:
    return "\n".join(f"  {MODULES[src].relative_to(ROOT)}:{line}  {src} -> {dst}" for src, dst, line in edges)


def _cycle() -> list[tuple[str, str, int]]:
    """One import cycle as (importer, imported, line) edges, by depth-first search; [] if none."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[tuple[str, str, int]] = []  # the edges from the search's root to the current module

    def visit(node: str) -> list[tuple[str, str, int]]:
        state[node] = "open"
        for target, line in EDGES[node]:
            if state.get(target) == "open":
                start = next((i for i, edge in enumerate(path) if edge[0] == target), len(path))
                return [*path[start:], (node, target, line)]
            if target not in state:
                path.append((node, target, line))
                if found := visit(target):
                    return found
                path.pop()
        state[node] = "done"
        return []

    return next((found for root in MODULES if root not in state and (found := visit(root))), [])


def _bad(rule: Callable[[str, str], bool]) -> list[tuple[str, str, int]]:
    return [(src, dst, line) for src in MODULES for dst, line in EDGES[src] if rule(src, dst)]


def _grpo_folder(name: str) -> str | None:
    parts = name.split(".")
    is_folder = len(parts) > 2 and parts[:2] == ["trainers", "grpo"] and MODULES[name].parent.name != "grpo"
    return parts[2] if is_folder else None


def test_no_import_cycles():
    assert not (cycle := _cycle()), "import cycle:\n" + _show(cycle)


def _core(name: str) -> bool:
    return _under(name, "verifiers") and name != "verifiers" and not _under(name, *LAYER)


def test_core_never_imports_the_compat_layer():
    bad = _bad(lambda src, dst: _core(src) and _under(dst, *LAYER))
    assert not bad, "the core imports verifiers.compat, verifiers.utils or verifiers.scripts:\n" + _show(bad)


V1 = "verifiers.v1"  # upstream 0.4's v1 authoring surface, a layer on top of the core
V1_SEAM = (
    "verifiers.cli.eval",  # names verifiers.v1.cli in DIALECTS: a taskset's command line is upstream's
    "verifiers.envs.loader",  # names verifiers.v1.adapter in ADAPTERS, a string it imports on demand
)


def test_the_core_never_imports_the_v1_layer():
    bad = _bad(lambda src, dst: _core(src) and not _under(src, V1) and _under(dst, V1))
    assert not bad, "the core imports verifiers.v1 (it sits on top of the core):\n" + _show(bad)
    # The one way down is by name: the loader's ADAPTERS, imported only for a module without load_environment.
    named = [n for n, p in MODULES.items() if _core(n) and not _under(n, V1) and f'"{V1}.' in p.read_text()]
    assert sorted(named) == sorted(V1_SEAM), f"only {V1_SEAM} may name a verifiers.v1 module: {named}"


def test_verifiers_imports_trainers_only_through_compat_training():
    bad = _bad(
        lambda src, dst: _under(src, "verifiers") and src != TRAINERS_ENTRY and _under(dst, "trainers")
    )
    assert not bad, f"only {TRAINERS_ENTRY} may import trainers:\n" + _show(bad)


def test_grpo_folders_import_one_way():
    unknown = sorted({f for m in MODULES if (f := _grpo_folder(m)) and f not in ALLOWED})
    assert not unknown, f"trainers/grpo folders missing from ALLOWED in tests/test_layers.py: {unknown}"
    bad = _bad(
        lambda src, dst: (
            (folder := _grpo_folder(src)) is not None
            and _under(dst, "trainers.grpo")
            and (other := _grpo_folder(dst)) != folder
            and other not in ALLOWED[folder]
        )
    )
    assert not bad, "trainers/grpo folder imports against the order (see ALLOWED):\n" + _show(bad)


# verifiers/inference (DESIGN.md): three rooms, engine/ at the bottom, server/ (the HTTP API) and
# vllm/ (vLLM servers) above it. Every other module directly in verifiers/inference/ is an old flat
# path (kv.py, api.py, vllm_server.py, ...) kept as a re-export for users; nothing of ours imports one.
INFERENCE = ROOT / "verifiers" / "inference"
ENGINE, SERVER, VLLM = (f"verifiers.inference.{room}" for room in ("engine", "server", "vllm"))
SHIMS = sorted(name for name, p in MODULES.items() if p.parent == INFERENCE and p.name != "__init__.py")


def _chain(src: str, *forbidden: str) -> list[tuple[str, str, int]]:
    """The shortest import chain from ``src`` to a module under ``forbidden``, every import followed; []."""
    came_from: dict[str, tuple[str, str, int] | None] = {src: None}
    queue = [src]
    while queue:
        node = queue.pop(0)
        for target, line in EDGES[node]:
            if target in came_from:
                continue
            came_from[target] = (node, target, line)
            if _under(target, *forbidden):
                chain = [came_from[target]]
                while (edge := came_from[chain[0][0]]) is not None:
                    chain.insert(0, edge)
                return chain
            queue.append(target)
    return []


def _reaching(room: str, *forbidden: str) -> str:
    """Each forbidden import some module of ``room`` reaches, shown once, by its shortest chain."""
    chains = sorted((_chain(src, *forbidden) for src in MODULES if _under(src, room)), key=len)
    shortest: dict[tuple[str, str, int], list[tuple[str, str, int]]] = {}
    for chain in filter(None, chains):
        shortest.setdefault(chain[-1], chain)
    return "\n\n".join(map(_show, shortest.values()))


def test_the_engine_imports_neither_the_server_nor_vllm():
    # directly or through any other module; the old flat paths count (they re-export server/ and vllm/)
    found = _reaching(ENGINE, SERVER, VLLM, *SHIMS)
    assert not found, "the engine reaches up into server/ or vllm/:\n" + found


def test_models_sit_below_inference():
    # verifiers.models (registry, GGUF, tokenizers, templates) is what inference loads: it never reaches up
    found = _reaching("verifiers.models", "verifiers.inference")
    assert not found, "verifiers.models reaches up into verifiers.inference:\n" + found


def test_vllm_and_the_server_do_not_import_each_other():
    # vllm/ starts and steers vLLM processes: it needs nothing of the embedded HTTP server, nor it of vllm/
    found = _reaching(VLLM, SERVER, *SHIMS) + _reaching(SERVER, VLLM, *SHIMS)
    assert not found, "verifiers.inference.vllm and verifiers.inference.server import each other:\n" + found


def test_inference_holds_only_its_three_rooms():
    # the old flat paths (kv.py, api.py, vllm_server.py, ...) were re-exports nobody outside imported: gone
    assert not SHIMS, "modules directly in verifiers/inference/ (code goes into engine/, server/ or vllm/): " + \
        ", ".join(SHIMS)


# Size limits: every module, class and function of the code we ship and run, no exceptions.
# A reader should find a room's purpose in its first lines; past these sizes one holds two jobs.
SIZED = ("verifiers", "trainers", "benchmarks", "environments")
MODULE_LINES, CLASS_LINES, FUNCTION_LINES = 700, 450, 100
# Tighter limits where a design document asks for them: (file, class or None) -> most lines.
SIZE_LIMITS = {
    ("trainers/grpo/trainer.py", None): 300,
    ("verifiers/inference/engine/core.py", "InferenceEngine"): 450,
}


def _sized_files() -> list[Path]:
    skip = {".venv", "build", "dist", "__pycache__"}
    return [
        p
        for folder in SIZED
        for p in sorted((ROOT / folder).rglob("*.py"))
        if not skip.intersection(p.relative_to(ROOT).parts) and not p.name.startswith(".")
    ]


def _oversized(path: Path) -> list[str]:
    rel = path.relative_to(ROOT)
    text = path.read_text()
    over = []
    if (lines := len(text.splitlines())) > MODULE_LINES:
        over.append(f"  {rel}: {lines} lines (module limit {MODULE_LINES})")
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.ClassDef):
            kind, limit = "class", CLASS_LINES
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kind, limit = "function", FUNCTION_LINES
        else:
            continue
        if (size := node.end_lineno - node.lineno + 1) > limit:
            over.append(f"  {rel}:{node.lineno} {kind} {node.name}: {size} lines (limit {limit})")
    return over


def test_every_module_class_and_function_is_within_the_size_limits():
    files = _sized_files()
    assert len(files) > 300, "the walk found too few files: the folders moved?"
    over = [line for path in files for line in _oversized(path)]
    assert not over, "over the size limit: split by job (argparse builders: group their flags)\n" + "\n".join(over)


def test_the_tighter_limits_hold():
    over = []
    for (rel, cls), limit in SIZE_LIMITS.items():
        path = ROOT / rel
        if cls is None:
            size = len(path.read_text().splitlines())
        else:
            node = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == cls)
            size = node.end_lineno - node.lineno + 1
        if size > limit:
            over.append(f"  {rel}{'::' + cls if cls else ''}: {size} lines (limit {limit})")
    assert not over, "over the size limit: split out a module with one job\n" + "\n".join(over)
