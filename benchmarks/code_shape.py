"""The engine's shape as figures (no timing): methods per class, explicit `Any`, docstring + comment lines
per code line, and, when `radon` is importable (`pip install radon`; not a project dependency), the
blocks ranked C or worse per 1,000 source lines and any F.

    .venv/bin/python benchmarks/code_shape.py [benchd]
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _doc_lines(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return out


def shape(package: Path) -> dict[str, object]:
    classes: list[tuple[int, str]] = []
    any_uses = doc = comment = code = 0
    for path in sorted(package.rglob("*.py")):
        src = path.read_text()
        tree = ast.parse(src)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                n = sum(isinstance(x, ast.FunctionDef | ast.AsyncFunctionDef) for x in node.body)
                classes.append((n, f"{path.relative_to(ROOT)}:{node.name}"))
            any_uses += isinstance(node, ast.Name) and node.id == "Any"
        docs = _doc_lines(tree)
        comments: set[int] = set()
        lines: set[int] = set()
        skip = (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                comments.add(tok.start[0])
            elif tok.type not in skip:
                lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
        doc += len(docs)
        comment += len(comments - docs - lines)
        code += len(lines)
    classes.sort(reverse=True)
    out: dict[str, object] = {
        "classes_over_20_methods": [f"{name} ({n})" for n, name in classes if n > 20],
        "explicit_any": any_uses,
        "doc_and_comment_per_code_line": f"{(doc + comment) / code:.4f} ({doc + comment:,} / {code:,})",
    }
    try:
        from radon.complexity import cc_rank, cc_visit
        from radon.raw import analyze
    except ImportError:
        out["radon"] = "not installed: pip install radon"
        return out
    blocks = sloc = 0
    f_ranked: list[str] = []
    for path in sorted(package.rglob("*.py")):
        src = path.read_text()
        sloc += analyze(src).sloc
        for block in cc_visit(src):  # functions, classes and methods, as `radon cc` lists them
            rank = cc_rank(block.complexity)
            blocks += rank >= "C"
            if rank == "F":
                f_ranked.append(f"{path.relative_to(ROOT)}:{block.name} ({block.complexity})")
    out["c_or_worse_per_1000_sloc"] = round(1000 * blocks / sloc, 2)
    out["f_ranked"] = f_ranked
    return out


def main() -> int:
    package = ROOT / (sys.argv[1] if len(sys.argv) > 1 else "benchd")
    for key, value in shape(package).items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
