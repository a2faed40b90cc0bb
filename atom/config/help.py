"""Help for every config field, from one source: the comments on the schema's fields.

A field's help is the comment block directly above it plus its trailing `# …` comment, as the
schema files are written (a `# -- title --` line heads a section and is no field's help).
`python -m atom.run --help` lists every group's options and every field with its type, current
value and help; the spec launcher's flags take their help from the field they set.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import textwrap
import tokenize
from typing import Any, Iterable, Iterator

from atom.config.compose import CONF_DIR, compose
from atom.config.schema import Config


@functools.lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Field name → help text for one schema dataclass ("" where the field has no comment)."""
    src = textwrap.dedent(inspect.getsource(cls))
    lines = src.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = ast.parse(src).body[0]
    docs: dict[str, str] = {}
    for node in getattr(body, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        n = node.lineno - 1
        while n >= 1 and n in comments and lines[n - 1].strip().startswith("#"):
            if comments[n].startswith("--"):
                break
            above.insert(0, comments[n])
            n -= 1
        trailing = [comments[i] for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                    if i in comments and not lines[i - 1].strip().startswith("#")]
        docs[node.target.id] = " ".join(above + trailing).strip()
    return docs


@dataclasses.dataclass(frozen=True)
class FieldHelp:
    path: str  # dotted, e.g. kv_cache.dtype
    type: str
    value: Any
    help: str


def fields(node: Any = None, prefix: str = "") -> Iterator[FieldHelp]:
    """Every leaf field of the tree (a group's dataclass is walked, not listed)."""
    node = Config() if node is None else node
    docs = field_docs(type(node))
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield from fields(value, f"{prefix}{f.name}.")
        else:
            yield FieldHelp(prefix + f.name, str(f.type), value, docs.get(f.name, ""))


def help_of(path: str) -> str:
    """The help of one dotted field (what a CLI flag that sets it shows)."""
    node: Any = Config()
    *groups, leaf = path.split(".")
    for g in groups:
        node = getattr(node, g)
    return field_docs(type(node)).get(leaf, "")


def group_doc(group: str) -> str | None:
    """A group's dataclass docstring (its own, not dataclass's generated signature)."""
    cls = type(getattr(Config(), group))
    doc = inspect.getdoc(cls)
    return None if doc is None or doc.startswith(cls.__name__ + "(") else " ".join(doc.split())


def missing_help() -> list[str]:
    """Fields without a comment: each needs one (the help test names them)."""
    return [f.path for f in fields() if not f.help]


def _group_options() -> dict[str, list[str]]:
    """conf/ group → its options; a group that is no field of the tree (experiment) is added
    with `+`, as it must be written."""
    tree = {f.name for f in dataclasses.fields(Config)}
    return {(d.name if d.name in tree else "+" + d.name): sorted(p.stem for p in d.glob("*.yaml"))
            for d in sorted(CONF_DIR.iterdir()) if d.is_dir()}


def _value(v: Any) -> str:
    """In Hydra's override syntax, so a line can be copied onto the command line."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def format_fields(items: Iterable[FieldHelp], width: int = 100) -> str:
    out: list[str] = []
    group = None
    for f in items:
        head = f.path.split(".", 1)[0] if "." in f.path else ""
        if head != group:
            group = head
            out.append(f"\n== {head or 'root'} ==")
            doc = group_doc(head) if head else None
            if doc:
                out += textwrap.wrap(doc, width, initial_indent="  ", subsequent_indent="  ")
        out.append(f"  {f.path}={_value(f.value)}  ({f.type})")
        if f.help:
            out += textwrap.wrap(f.help, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(out)


RUN_ABOUT = ("Serve (job=serve, the default), generate, run the offline throughput benchmark or a "
             "serving benchmark from one validated config.")


def run_help(overrides: list[str], prog: str = "python -m atom.run", about: str = RUN_ABOUT) -> str:
    """`python -m atom.run [overrides] --help` (and atom.bench's): the groups, then every field
    at its value under these overrides (the defaults when there are none)."""
    cfg = compose(overrides)
    groups = "\n".join(f"  {g}: {', '.join(opts)}" for g, opts in _group_options().items())
    intro = textwrap.fill(about + " A group option picks a conf/ file; field=value sets one "
                          "field (an unknown field is an error). Hydra's own flags: --hydra-help.")
    return (f"{prog} [group=option ...] [field=value ...] [--cfg job] [-m] [--help]\n\n{intro}"
            "\n\n== groups (group=option) ==\n" + groups + "\n" + format_fields(fields(cfg)))


def help_asked(argv: list[str]) -> bool:
    return "--help" in argv or "-h" in argv
